"""A writer process for the crash torture test: ``python crash_writer.py STORE ACKLOG sync|sync-c|async RUN SEED``.

It opens a :class:`MessageStore` and appends batches of keyed messages to four queues until it
is killed. Only once a batch is acknowledged (SYNC_FLUSH: ``request_flush`` confirmed the sync,
or in ``sync-c`` mode the store's C syncer did, the way the broker's loop_sync drives it;
ASYNC_FLUSH: ``put`` returned) does it append one line per message to the ack log,
``run seq queue_id queue_offset physical_offset size``, and fsync that log. Message ``(run, seq)``
has deterministic content (:func:`make_record`), so the checker can rebuild its exact bytes.

Self-contained on purpose (imports only ``pymq``): it runs as a script, not from the tests package.
"""

from __future__ import annotations

import hashlib
import os
import random
import select
import sys
import threading
from pathlib import Path

from pymq.broker.store import MessageStore, PutStatus
from pymq.config import FlushDiskType, StoreConfig
from pymq.protocol.record import encode_record, pack_host

TOPIC = "Torture"
QUEUES = 4
BORN_HOST = pack_host("10.9.8.7", 1234)


def writer_config(store_dir: Path, mode: str) -> StoreConfig:
    """Small files, so that kills land around commitlog, consume-queue and index rollovers too."""
    return StoreConfig(
        store_dir=store_dir,
        commitlog_file_size=512 * 1024,
        consume_queue_file_entries=500,
        index_hash_slots=512,
        index_max_entries=3000,
        flush_disk_type=FlushDiskType.SYNC_FLUSH if mode.startswith("sync") else FlushDiskType.ASYNC_FLUSH,
        flush_interval_ms=50,
        consume_queue_flush_interval_ms=200,
        cleanup_interval_ms=3_600_000,
    )


def uniq_key(run: int, seq: int) -> str:
    return f"R{run}S{seq}"


def make_record(run: int, seq: int) -> bytes:
    """The producer-side bytes of message ``(run, seq)``."""
    digest = hashlib.sha256(f"{run}:{seq}".encode()).digest()
    body = digest * (1 + seq % 24)
    props = (
        b"UNIQ_KEY\x01" + uniq_key(run, seq).encode() + b"\x02"
        b"TAGS\x01t" + str(seq % 3).encode() + b"\x02"
        b"KEYS\x01k" + f"{run}-{seq}".encode() + b"\x02"
    )
    return encode_record(TOPIC.encode(), body, props, born_timestamp=1_700_000_000_000 + seq, born_host=BORN_HOST)


class _FlushWaiter:
    """A request_flush callback the writer can block on."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False

    def __call__(self, ok: bool) -> None:
        self.ok = ok
        self.done.set()

    def wait(self, timeout: float) -> bool:
        return self.done.wait(timeout) and self.ok


def _synced_by_syncer(store: MessageStore, upto: int, timeout: float) -> bool:
    """Sync through the store's C syncer (plan, submit, wait on its eventfd, take, record), as loop_sync does."""
    syncer = store.syncer
    assert syncer is not None
    plan = store.sync_plan(upto)
    if plan is None:
        return store.flushed_offset >= upto
    syncer.submit(plan, plan.ranges)
    if not select.select([syncer.fileno()], [], [], timeout)[0]:
        raise SystemExit("the syncer did not answer")
    ((token, err),) = syncer.take()
    assert token is plan
    store.sync_done(plan, err == 0)
    return err == 0


def main(argv: list[str]) -> None:
    store_dir, ack_path, mode, run, seed = Path(argv[0]), argv[1], argv[2], int(argv[3]), int(argv[4])
    store = MessageStore(writer_config(store_dir, mode), store_host="127.0.0.1:10911")
    store.start()
    _drop_partial_line(Path(ack_path))
    ack_fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    rng = random.Random(seed)
    seq = 0
    sync = mode.startswith("sync")
    by_syncer = mode == "sync-c" and store.syncer is not None
    while True:
        count = rng.randint(1, 24)
        qid = rng.randrange(QUEUES)
        results = store.put(TOPIC, qid, b"".join(make_record(run, seq + i) for i in range(count)))
        if any(r.status != PutStatus.PUT_OK for r in results):
            raise SystemExit(f"put failed: {results[0]}")
        if by_syncer:
            if not _synced_by_syncer(store, max(r.physical_offset + r.size for r in results), 10):
                seq += count
                continue  # not acknowledged
        elif sync:
            waiter = _FlushWaiter()
            store.request_flush(max(r.physical_offset + r.size for r in results), waiter)
            if not waiter.wait(10):
                seq += count
                continue  # not acknowledged
        lines = "".join(
            f"{run} {seq + i} {r.queue_id} {r.queue_offset} {r.physical_offset} {r.size}\n"
            for i, r in enumerate(results)
        )
        os.write(ack_fd, lines.encode())
        os.fsync(ack_fd)
        seq += count


def _drop_partial_line(path: Path) -> None:
    """A kill can cut the previous run's last write short (a fatal signal stops a write between
    pages): that partial line was never acknowledged, and appending to it would merge it with
    this run's first line, so it goes before this run appends."""
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        os.truncate(path, end)


if __name__ == "__main__":
    main(sys.argv[1:])
