"""Crash torture: a writer process is SIGKILLed at random moments; nothing acknowledged may be lost.

SYNC_FLUSH: the writer acknowledges a batch (appends it to an fsynced ack log) only after
``request_flush`` (or the C syncer, every other writer) confirmed that the sync covering it
finished. After each kill the store is reopened here (abnormal recovery) and every acknowledged
message must be readable by queue offset and by key, byte for byte, and every record any queue
serves must parse with a valid CRC at the position its consume-queue entry gives.

ASYNC_FLUSH, honestly: ``kill -9`` ends the process but not the kernel, so the page cache, and
with it every byte the store wrote through its mappings, survives; an acknowledged ASYNC
message is therefore not lost to a process crash either, and the kill test below checks
exactly that. What ASYNC_FLUSH does risk is an OS crash or power cut, which would lose
whatever was not yet synced. That cannot be produced from a test, so instead we measure the
bound: during steady writes, the durable point (the flushed commitlog offset, and the
checkpoint's ``physic_ts``) never lags the newest stored message by more than the flush
interval plus a small slack. A power cut would lose at most that window.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.broker.store import GetStatus, MessageStore
from pymq.config import FlushDiskType
from pymq.protocol.record import parse_record
from tests.store.crash_writer import QUEUES, TOPIC, make_record, uniq_key, writer_config
from tests.store.storeutil import keyed, make_config

pytestmark = pytest.mark.slow

WRITER = Path(__file__).with_name("crash_writer.py")
Ack = tuple[int, int, int, int, int, int]  # run, seq, queue id, queue offset, physical offset, size


def _acked(path: Path) -> list[Ack]:
    """Complete lines of the ack log (a kill can leave a partial last line, which does not count)."""
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")[:-1]
    return [tuple(int(x) for x in line.split()) for line in lines]  # type: ignore[misc]


def _run_and_kill(tmp: Path, mode: str, run: int, rng: random.Random, early: bool) -> int:
    """Start the writer, SIGKILL it at a random moment; returns how many lines it acknowledged."""
    ack = tmp / "ack.log"
    before = len(_acked(ack))
    with open(tmp / "writer.log", "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(WRITER),
                str(tmp / "store"),
                str(ack),
                mode,
                str(run),
                str(rng.randrange(1 << 30)),
            ],
            stdout=log,
            stderr=log,
        )
    try:
        if early:
            # Anywhere from interpreter start-up through recovery to the first writes.
            time.sleep(rng.uniform(0.0, 0.6))
        else:
            deadline = time.monotonic() + 30
            while len(_acked(ack)) == before:
                assert proc.poll() is None, (tmp / "writer.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "writer made no progress"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.25))
        assert proc.poll() is None, (tmp / "writer.log").read_text()[-3000:]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return len(_acked(ack)) - before


def _check(tmp: Path, mode: str, acked: list[Ack], expected: dict[tuple[int, int], bytes]) -> MessageStore:
    """Reopen after the kill and prove every acknowledged message is there and nothing torn is served."""
    crashed = (tmp / "store" / "abort").exists()  # not if the kill came before the writer opened the store
    store = MessageStore(writer_config(tmp / "store", mode), store_host="127.0.0.1:10911")
    store.start()
    assert store.recovery is not None and store.recovery.abnormal == crashed
    by_position = {(qid, qoff): (run, seq, phys, size) for run, seq, qid, qoff, phys, size in acked}
    # Every record every queue serves: valid CRC, at the offset its entry gives, acked ones byte for byte.
    served = 0
    for qid in range(QUEUES):
        offset = store.min_offset(TOPIC, qid)
        while True:
            res = store.get_messages("check", TOPIC, qid, offset, 512, 1 << 30)
            if res.status != GetStatus.FOUND:
                # A queue the writer never reached before its kill does not exist yet.
                never_written = not any(a[2] == qid for a in acked)
                allowed = {GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE}
                if never_written:
                    allowed.add(GetStatus.NO_MATCHED_LOGIC_QUEUE)
                assert res.status in allowed, res
                break
            for buf in res.buffers:
                pos = 0
                while pos < len(buf):
                    r = parse_record(buf, pos, check_crc=True)
                    raw = bytes(buf[pos : pos + r.total_size])
                    assert (r.queue_id, r.queue_offset) == (qid, offset)
                    assert r.topic == TOPIC.encode()
                    if (qid, offset) in by_position:
                        run, seq, phys, size = by_position[(qid, offset)]
                        want = expected[(run, seq)]
                        assert (r.physical_offset, r.total_size) == (phys, size)
                        assert raw[:48] == want[:48] and raw[84:] == want[84:]
                        served += 1
                    pos += r.total_size
                    offset += 1
            assert offset == res.next_begin_offset
    assert served == len(acked), "an acknowledged message is missing from its queue"
    # And by key: the unique key finds exactly the acknowledged record. Every run's own
    # messages, and a sample of the older ones (all of them each run made the test quadratic;
    # their bytes were checked above through their queues).
    last_run = max((a[0] for a in acked), default=-1)
    recent = [a for a in acked if a[0] >= last_run - 1]
    older = [a for a in acked if a[0] < last_run - 1]
    sample = random.Random(len(acked)).sample(older, min(len(older), 200))
    for run, seq, _qid, _qoff, phys, _size in recent + sample:
        found = store.query_by_key(TOPIC, uniq_key(run, seq))
        assert [bytes(f) for f in found] == [bytes(store.read_record(phys))], (run, seq)  # type: ignore[arg-type]
    return store


def _torture(tmp_path: Path, modes: tuple[str, ...], kills: int, seed: int) -> None:
    """``kills`` writers on one store, each killed; writer ``n`` runs in ``modes[n % len(modes)]``."""
    rng = random.Random(seed)
    expected: dict[tuple[int, int], bytes] = {}
    total_new = 0
    for run in range(kills):
        mode = modes[run % len(modes)]
        early = run % 4 == 3
        total_new += _run_and_kill(tmp_path, mode, run, rng, early)
        acked = _acked(tmp_path / "ack.log")
        for r, seq, *_ in acked:
            if (r, seq) not in expected:
                expected[(r, seq)] = make_record(r, seq)
        store = _check(tmp_path, mode, acked, expected)
        # Leave the store cleanly or not: the next writer then starts with a clean or an
        # abnormal recovery (and an early kill may land in the middle of it).
        if run % 2:
            store.halt()
        else:
            store.shutdown()
    assert total_new > 0 and len(_acked(tmp_path / "ack.log")) == total_new


def test_sync_flush_survives_kill_9(tmp_path: Path) -> None:
    """SYNC_FLUSH writer killed 22 times at random moments: every acknowledged message survives intact.

    Every other writer syncs through the store's C syncer (sync_plan / Syncer / sync_done, as the
    broker's loop_sync does), the others through the flusher thread (request_flush).
    """
    _torture(tmp_path, ("sync", "sync-c"), kills=22, seed=20260)


def test_async_flush_survives_kill_9(tmp_path: Path) -> None:
    """ASYNC_FLUSH writer killed 6 times: acked messages survive too (the page cache outlives the process)."""
    _torture(tmp_path, ("async",), kills=6, seed=777)


def test_async_flush_durable_point_lags_by_at_most_the_flush_interval(tmp_path: Path) -> None:
    """During steady ASYNC writes the flushed offset and the checkpoint's physic_ts trail the newest
    stored message by no more than flush_interval plus a small slack: the most a power cut could lose."""
    interval_ms = 200
    slack_ms = 250
    cfg = make_config(
        tmp_path / "store",
        commitlog_file_size=4 << 20,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        flush_interval_ms=interval_ms,
    )
    store = MessageStore(cfg)
    store.start()
    try:
        batch = b"".join(keyed(i, size=1000) for i in range(32))  # 32 KiB: over flush_least_pages every time
        samples: list[tuple[float, int, int, int, int]] = []
        stop = time.monotonic() + 2.5
        while time.monotonic() < stop:
            res = store.put("T", 0, batch)
            end = res[-1].physical_offset + res[-1].size
            samples.append(
                (time.monotonic(), end, store.flushed_offset, store.last_store_ts, store.checkpoint.physic_ts)
            )
            time.sleep(0.002)  # a steady producer, not a flat-out loop
    finally:
        store.shutdown()
    assert len(samples) > 200
    worst_offset_lag = 0.0
    for i, (t, end, *_rest) in enumerate(samples):
        j = next((k for k in range(i, len(samples)) if samples[k][2] >= end), None)
        if j is None:
            assert samples[-1][0] - t <= (interval_ms + slack_ms) / 1000  # the tail: too recent to judge
            continue
        worst_offset_lag = max(worst_offset_lag, samples[j][0] - t)
    warm = [s for s in samples if s[4] > 0]
    worst_ts_lag = max(last_ts - physic_ts for _t, _e, _f, last_ts, physic_ts in warm)
    assert worst_offset_lag * 1000 <= interval_ms + slack_ms, worst_offset_lag
    assert worst_ts_lag <= interval_ms + slack_ms, worst_ts_lag
