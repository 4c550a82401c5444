"""Helpers for the store tests: small configurations, record builders, raw file readers, stores filled and compared."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.store import MessageStore, file_maker
from pymq.config import StoreConfig
from pymq.protocol import accelerator
from pymq.protocol import record as record_module
from pymq.protocol.record import encode_record, pack_host, parse_record
from tests.helpers import wait_until_sync

#: Tiny files so that every rollover happens within a few records.
SMALL = {
    "commitlog_file_size": 16 * 1024,
    "consume_queue_file_entries": 16,
    "index_hash_slots": 8,
    "index_max_entries": 64,
    # The background cleaner must not act on its own during a test: tests call run_cleanup().
    "cleanup_interval_ms": 3_600_000,
    "delete_when": "04",
    # Measured against a 1 TiB disk of their own: how full the test machine's disk happens to be
    # must not delete files or refuse writes (a CI disk at 86 % once did). Tests of disk pressure
    # set a capacity of their own; the statvfs test sets None.
    "simulated_disk_capacity": 1 << 40,
}

BORN_HOST = pack_host("10.1.2.3", 45678)


def make_config(root: Path, **overrides: Any) -> StoreConfig:
    values = {**SMALL, **overrides}
    return StoreConfig(store_dir=root, **values)


STORE_HOST = "192.168.7.9:10911"


def open_store(root: Path, **overrides: Any) -> MessageStore:
    store = MessageStore(make_config(root, **overrides), store_host=STORE_HOST)
    store.start()
    return store


def record(
    topic: str = "T",
    body: bytes = b"hello",
    *,
    tags: str | None = None,
    keys: Iterable[str] = (),
    uniq: str | None = None,
    delay: int = 0,
    props: dict[str, str] | None = None,
    flag: int = 0,
    born_timestamp: int = 1_700_000_000_000,
) -> bytes:
    """One record as a producer encodes it (broker block left at zero)."""
    parts = []
    if uniq is not None:
        parts.append(b"UNIQ_KEY\x01" + uniq.encode() + b"\x02")
    if tags is not None:
        parts.append(b"TAGS\x01" + tags.encode() + b"\x02")
    keys = list(keys)
    if keys:
        parts.append(b"KEYS\x01" + " ".join(keys).encode() + b"\x02")
    if delay:
        parts.append(b"DELAY\x01" + str(delay).encode() + b"\x02")
    for k, v in (props or {}).items():
        parts.append(k.encode() + b"\x01" + v.encode() + b"\x02")
    return encode_record(
        topic.encode(),
        body,
        b"".join(parts),
        flag=flag,
        born_timestamp=born_timestamp,
        born_host=BORN_HOST,
    )


def keyed(i: int, topic: str = "T", size: int = 40) -> bytes:
    """Record ``i`` with a unique key ``U<i>``, business key ``K<i>`` and tag ``A``/``B``."""
    body = (f"message-{i}-".encode() * (size // 10 + 1))[:size]
    return record(topic, body, tags="A" if i % 2 else "B", keys=[f"K{i}"], uniq=f"U{i}")


def records_of(result: Any) -> list[Any]:
    """Parse every record of a GetResult's buffers, checking each body CRC."""
    out = []
    for buf in result.buffers:
        pos = 0
        while pos < len(buf):
            r = parse_record(buf, pos, check_crc=True)
            out.append(r)
            pos += r.total_size
    return out


def bodies(result: Any) -> list[bytes]:
    return [bytes(r.body) for r in records_of(result)]


def read_queue(store: MessageStore, topic: str, qid: int, start: int = 0) -> list[Any]:
    """Every record of a queue from ``start``, through get_messages."""
    out = []
    offset = start
    while True:
        res = store.get_messages("g", topic, qid, offset, 64, 1 << 30)
        if not res.message_count:
            return out
        out.extend(records_of(res))
        offset = res.next_begin_offset


def cq_entries(path: Path) -> list[tuple[int, int, int]]:
    """The non-zero 20-byte entries of a consume-queue file."""
    raw = path.read_bytes()
    out = []
    for e in struct.iter_unpack(">qiq", raw):
        if e == (0, 0, 0):
            break
        out.append(e)
    return out


def use_c_syncer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give stores the C syncer even where PYMQ_NO_SPEEDUPS switched the accelerator off (skip where
    it is not built; tests/store/test_syncer.py checks it is built wherever it can be)."""
    if getattr(accelerator._speedups, "Syncer", None) is None:
        pytest.skip("no C accelerator here")
    monkeypatch.setattr(record_module, "speedups", accelerator._speedups)


# --- filling stores (test_cleanup, test_disk_full) ----------------------------------------------


def quiet(store: MessageStore) -> MessageStore:
    """Stop the warmer and drop its preallocated file, so the simulated disk usage is exact."""
    store.services.warmer.stop()  # type: ignore[union-attr]
    nf = store.commitlog.mfq.next_file
    if nf is not None:
        nf.destroy()
        store.commitlog.mfq.next_file = None
    return store


def fill(store: MessageStore, files: int) -> list:  # type: ignore[type-arg]
    """Write two queues until the commitlog has ``files`` files."""
    out = []
    i = 0
    while len(store.commitlog.mfq.files) < files:
        out += store.put("T", (i // 4) % 2, b"".join(keyed(j, size=400) for j in range(i, i + 4)))
        i += 4
    # New consume-queue files are made on the maker thread: have them all on disk before a
    # test counts them (a race that failed once in a CI run).
    store.settle_queue_files()
    settle_index_ahead(store)
    return out


def settle_index_ahead(store: MessageStore) -> None:
    """Wait for the next index file the maker thread makes ahead (if one is queued): a test that then
    counts bytes or makes allocations fail sees no creation of its own in flight."""
    nxt = store.index.next
    if nxt is not None:
        wait_until_sync(lambda: nxt.making == file_maker.MADE, timeout=30, what="the next index file")


def this_hour(now: float) -> str:
    return str(time.localtime(now).tm_hour)


def other_hour(now: float) -> str:
    return str((time.localtime(now).tm_hour + 12) % 24)


# --- comparing stores (test_append_raw, test_truncate) ---------------------------------------------


def put_mixed(put, count: int) -> None:  # type: ignore[no-untyped-def]
    """Records of two topics over several queues, with keys, tags and a few delayed ones."""
    for i in range(count):
        topic = "T" if i % 3 else "U"
        batch = keyed(i, topic, size=200 + i % 7 * 60) + keyed(1000 + i, topic)
        if i % 10 == 5:
            batch += record(topic, b"later", delay=2, uniq=f"D{i}")
        put(topic, i % 4, batch)


def queue_entries(store: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int] | None]]:
    return {
        key: [cq.entry(i) for i in range(cq.min_offset, cq.max_offset)]
        for key, cq in sorted(store.queues.items())
        if cq.max_offset
    }


def commitlog_bytes(store: MessageStore, start: int = 0) -> bytes:
    views = store.read_commitlog(start, store.commitlog.max_offset - start)
    return b"".join(bytes(v) for v in views)


def record_cuts(store: MessageStore) -> list[int]:
    """Offsets to cut the commitlog at: every few records, and each file's end."""
    cuts = []
    for n, (mf, pos, size, *_rest) in enumerate(store.commitlog.scan(0, False)):
        if n % 7 == 6:
            cuts.append(mf.file_from + pos + size)
    cuts += [mf.file_to for mf in store.commitlog.mfq.files[:-1]]
    cuts.append(store.commitlog.max_offset)
    return sorted(set(cuts))
