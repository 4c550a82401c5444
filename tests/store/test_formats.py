"""On-disk formats: record layout, blank marker, consume-queue entries, index files, checkpoint, names."""

from __future__ import annotations

import os
import re
import struct
import threading
import time
import zlib
from pathlib import Path

from pymq.broker.store import MessageStore
from pymq.broker.store.index import HEADER_SIZE, key_hash
from pymq.protocol.record import BLANK_MAGIC, MAGIC, pack_host, parse_record
from tests.store.conftest import StoreFactory
from tests.store.storeutil import cq_entries, keyed, read_queue, record

STORE_HOST = pack_host("192.168.7.9", 10911)


def _commitlog_bytes(store: MessageStore, phys: int, size: int) -> bytes:
    file_size = store.config.commitlog_file_size
    name = f"{phys - phys % file_size:020d}"
    with open(store.root / "commitlog" / name, "rb") as f:
        f.seek(phys % file_size)
        return f.read(size)


def test_record_layout_on_disk(store: MessageStore) -> None:
    """A stored record is the producer's bytes with only the broker block (bytes 48..84) patched."""
    rec = record("T", b"payload-bytes", tags="tagX", keys=["k1"], uniq="UID-1", flag=7)
    store.put("T", 0, rec)  # queue offset 0 of queue 0
    rec2 = record("T", b"second", uniq="UID-2")
    r = store.put("T", 3, rec2)[0]
    store.shutdown()
    raw = _commitlog_bytes(store, r.physical_offset, r.size)
    assert len(raw) == len(rec2) == r.size
    assert raw[:48] == rec2[:48]
    assert raw[84:] == rec2[84:]
    total, magic = struct.unpack_from(">iI", raw, 0)
    assert (total, magic) == (len(rec2), MAGIC)
    assert struct.unpack_from(">I", raw, 8)[0] == zlib.crc32(b"second")
    qid, qoff, phys, store_ts, host = struct.unpack_from(">iqqq8s", raw, 48)
    assert (qid, qoff, phys, host) == (3, 0, r.physical_offset, STORE_HOST)
    assert store_ts == r.store_timestamp and abs(store_ts - time.time() * 1000) < 60_000
    assert struct.unpack_from(">i", raw, 84)[0] == len(b"second")
    parsed = parse_record(raw, check_crc=True)
    assert parsed.topic == b"T" and parsed.properties == b"UNIQ_KEY\x01UID-2\x02"


def test_commitlog_rollover_writes_blank_marker_and_never_splits_records(store: MessageStore) -> None:
    """When a record does not fit, the file ends with [remaining][BLANK_MAGIC] and the record moves on."""
    file_size = store.config.commitlog_file_size
    results = []
    for i in range(120):
        body = os.urandom(50 + (i * 37) % 700)
        results += store.put("T", i % 2, record("T", body, uniq=f"u{i}"))
    files = sorted(p.name for p in (store.root / "commitlog").iterdir())
    assert len(files) >= 4
    assert files[:4] == [f"{n * file_size:020d}" for n in range(4)]
    for r in results:
        assert r.physical_offset // file_size == (r.physical_offset + r.size - 1) // file_size
    # The last record of each full file is followed by the blank marker filling the file.
    by_file: dict[int, int] = {}
    for r in results:
        by_file[r.physical_offset // file_size] = max(
            by_file.get(r.physical_offset // file_size, 0), r.physical_offset + r.size
        )
    # Files before the one being written are full; the warmer may have created the next
    # one already, so the listing can hold one more (empty) file.
    writing = max(by_file)
    assert writing >= 3 and len(files) in (writing + 1, writing + 2)
    for n in range(writing):
        end = by_file[n]
        marker = _commitlog_bytes(store, end, 8)
        assert struct.unpack(">iI", marker) == (file_size * (n + 1) - end, BLANK_MAGIC)
        assert any(r.physical_offset == file_size * (n + 1) for r in results)
    assert [bytes(r.body) for r in read_queue(store, "T", 0)] == [
        bytes(parse_record(_commitlog_bytes(store, r.physical_offset, r.size)).body) for r in results if r.queue_id == 0
    ]


def test_consume_queue_entries_and_rollover(store: MessageStore) -> None:
    """Entry N is at byte N*20: (commitlog offset, size, crc32 of the tag); files are named by byte offset."""
    results = []
    for i in range(40):
        rec = record("T", f"m{i}".encode(), tags="A" if i % 2 else None)
        results += store.put("T", 2, rec)
    store.flush_logics()
    qdir = store.root / "consumequeue" / "T" / "2"
    per_file = store.config.consume_queue_file_entries * 20
    names = sorted(p.name for p in qdir.iterdir())
    assert names == [f"{n * per_file:020d}" for n in range(3)]
    entries = []
    for name in names:
        entries += cq_entries(qdir / name)
    assert len(entries) == 40
    for i, (r, e) in enumerate(zip(results, entries, strict=True)):
        assert r.queue_offset == i
        assert e == (r.physical_offset, r.size, zlib.crc32(b"A") if i % 2 else 0)


def test_index_file_header_slots_entries_and_chains(store: MessageStore) -> None:
    """Index: 40-byte header, slots holding the newest entry, 20-byte entries chained newest to oldest."""
    results = []
    for i in range(20):
        results += store.put("T", 0, record("T", b"x", uniq=f"U{i}", keys=[f"K{i % 3}"]))
    store.shutdown()
    files = sorted((store.root / "index").iterdir())
    assert len(files) == 1 and re.fullmatch(r"\d{17}", files[0].name)
    created = time.mktime(time.strptime(files[0].name[:14], "%Y%m%d%H%M%S"))
    assert abs(created - time.time()) < 120
    raw = files[0].read_bytes()
    slots, max_entries = store.config.index_hash_slots, store.config.index_max_entries
    assert len(raw) == HEADER_SIZE + 4 * slots + 20 * max_entries
    begin_ts, end_ts, begin_phys, end_phys, nslots, count = struct.unpack_from("<qqqqii", raw, 0)
    assert nslots == slots and count == 1 + 40
    assert begin_ts == results[0].store_timestamp and end_ts == results[-1].store_timestamp
    assert begin_phys == results[0].physical_offset and end_phys == results[-1].physical_offset
    base = HEADER_SIZE + 4 * slots
    entries = [struct.unpack_from("<Iqii", raw, base + 20 * n) for n in range(count)]
    assert entries[0] == (0, 0, 0, 0)  # entry 0 is never used
    expected_keys = []
    for i, r in enumerate(results):
        expected_keys += [(f"T#U{i}", r), (f"T#K{i % 3}", r)]
    for n, (key, r) in enumerate(expected_keys, start=1):
        h, phys, tdiff, _prev = entries[n]
        assert h == key_hash(key.encode()) and phys == r.physical_offset
        assert tdiff == (r.store_timestamp - begin_ts) // 1000
    for slot in range(slots):
        head = struct.unpack_from("<i", raw, HEADER_SIZE + 4 * slot)[0]
        chain = []
        while head:
            chain.append(head)
            head = entries[head][3]
        assert chain == [n for n in range(count - 1, 0, -1) if entries[n][0] % slots == slot]


def test_index_rolls_to_a_new_file_when_full(store: MessageStore) -> None:
    """A full index file (index_count == max_entries) is followed by a new one; lookups search both."""
    for i in range(50):  # two keys each: 100 entries, 63 per file
        store.put("T", 0, keyed(i))
    names = sorted(p.name for p in (store.root / "index").iterdir())
    assert len(names) == 2
    first = (store.root / "index" / names[0]).read_bytes()
    assert struct.unpack_from("<i", first, 36)[0] == store.config.index_max_entries
    for i in (0, 20, 31, 32, 49):
        found = store.query_by_key("T", f"K{i}")
        assert [parse_record(r).properties for r in found] == [
            f"UNIQ_KEY\x01U{i}\x02TAGS\x01{'A' if i % 2 else 'B'}\x02KEYS\x01K{i}\x02".encode()
        ]


def test_checkpoint_layout(new_store: StoreFactory) -> None:
    """checkpoint: physic_ts, logics_ts, index_ts, flushed_phys, clean_end (-1 while running), big-endian."""
    store = new_store()
    res = store.put("T", 0, keyed(1) + keyed(2))
    end = res[-1].physical_offset + res[-1].size
    flushed = threading.Event()
    store.request_flush(end, lambda ok: ok and flushed.set())
    assert flushed.wait(10)
    store.flush_logics()
    raw = (store.root / "checkpoint").read_bytes()
    assert len(raw) == 4096
    physic_ts, logics_ts, index_ts, flushed_phys, clean_end = struct.unpack_from(">qqqqq", raw, 0)
    assert physic_ts == logics_ts == index_ts == res[-1].store_timestamp
    assert flushed_phys == end and clean_end == -1
    store.shutdown()
    physic_ts, logics_ts, index_ts, flushed, clean_end = struct.unpack_from(
        ">qqqqq", (store.root / "checkpoint").read_bytes(), 0
    )
    assert physic_ts == logics_ts == index_ts == res[-1].store_timestamp
    assert flushed == clean_end == end


def test_abort_and_lock_files(new_store: StoreFactory, tmp_path: Path) -> None:
    """The abort file exists while the store runs and goes on a clean shutdown; lock holds the pid."""
    store = new_store()
    assert (store.root / "abort").exists()
    assert (store.root / "lock").read_text() == str(os.getpid())
    store.shutdown()
    assert not (store.root / "abort").exists()
