"""Restarts: clean and abnormal recovery, torn tails, consume-queue and index repair, the lock file."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from pymq.broker.delay.hook import SCHEDULE_TOPIC
from pymq.broker.store import MessageStore, PutStatus, file_maker
from pymq.broker.store.index import HEADER_SIZE
from pymq.broker.store.map_pool import PooledMappedFile
from pymq.errors import StoreError, StoreLockedError
from pymq.protocol.record import parse_record
from tests.store.conftest import PutPathFactory, StoreFactory
from tests.store.storeutil import keyed, read_queue, record

FILE = 16 * 1024


def _fill(store: MessageStore, n: int, queues: int = 3) -> list:  # type: ignore[type-arg]
    out = []
    for i in range(0, n, 5):
        out += store.put("T", (i // 5) % queues, b"".join(keyed(j, size=300) for j in range(i, i + 5)))
    assert all(r.status == PutStatus.PUT_OK for r in out)
    return out


def _expected(results: list, qid: int) -> list[int]:  # type: ignore[type-arg]
    return [r.physical_offset for r in results if r.queue_id == qid]


def _assert_intact(store: MessageStore, results: list) -> None:  # type: ignore[type-arg]
    """Every stored record is served from its queue, byte for byte, and found by its keys."""
    for qid in {r.queue_id for r in results}:
        served = read_queue(store, "T", qid)
        assert [r.physical_offset for r in served] == _expected(results, qid)
    for r in results[:: max(1, len(results) // 10)]:
        rec = store.read_record(r.physical_offset)
        assert rec is not None
        uniq = parse_record(rec).properties.split(b"\x02")[0][9:].decode()
        assert [bytes(x) for x in store.query_by_key("T", uniq)] == [bytes(rec)]


def _crash(store: MessageStore) -> None:
    """What kill -9 leaves once the maker thread made the new queues' files (a millisecond after
    their first entries; ``test_entries_of_files_still_being_made_are_redispatched`` covers the rest)."""
    store.settle_queue_files()
    store.halt()


def _commitlog_file(store: MessageStore, offset: int) -> Path:
    return store.root / "commitlog" / f"{offset - offset % FILE:020d}"


def _patch_file(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def test_clean_restart_scans_only_the_last_file(new_store: StoreFactory) -> None:
    """After a clean shutdown, restart trusts the checkpoint: only the file holding the end is scanned."""
    store = new_store()
    results = _fill(store, 150)
    end = store.commitlog.max_offset
    assert len(store.commitlog.mfq.files) >= 3
    store.shutdown()
    store = new_store()
    rep = store.recovery
    assert rep is not None and not rep.abnormal and rep.commitlog_end == end
    assert rep.scanned_bytes == end % FILE and rep.redispatched_cq == rep.truncated_bytes == 0
    _assert_intact(store, results)
    nxt = store.put("T", 0, keyed(999))[0]
    assert nxt.physical_offset == end and nxt.queue_offset == len(_expected(results, 0))


def test_abnormal_restart_keeps_everything(new_store: StoreFactory) -> None:
    """Without a clean shutdown (abort file left), recovery re-verifies and keeps every record."""
    store = new_store()
    results = _fill(store, 100)
    end = store.commitlog.max_offset
    _crash(store)
    assert (store.root / "abort").exists()
    store = new_store()
    rep = store.recovery
    assert rep is not None and rep.abnormal and rep.commitlog_end == end and rep.truncated_bytes == 0
    assert rep.scanned_records > 0 and rep.redispatched_cq == 0 and rep.dropped_cq_entries == 0
    _assert_intact(store, results)
    assert store.put("T", 1, keyed(500))[0].physical_offset == end


def _garbage(store: MessageStore, results: list) -> bytes:  # type: ignore[type-arg]
    return b"\xab" * 300


def _half_record(store: MessageStore, results: list) -> bytes:  # type: ignore[type-arg]
    last = results[-1]
    return bytes(store.read_record(last.physical_offset))[: last.size // 2]  # type: ignore[arg-type]


def _unpatched_record(store: MessageStore, results: list) -> bytes:  # type: ignore[type-arg]
    return keyed(12345, size=300)  # valid body and CRC, broker block never written


def _bad_crc_record(store: MessageStore, results: list) -> bytes:  # type: ignore[type-arg]
    end = store.commitlog.max_offset
    rec = bytearray(keyed(777, size=300))
    struct.pack_into(">iqqq", rec, 48, 0, 99, end, results[-1].store_timestamp)
    rec[100] ^= 0xFF
    return bytes(rec)


@pytest.mark.parametrize("tail", [_garbage, _half_record, _unpatched_record, _bad_crc_record])
def test_torn_tail_is_truncated_and_never_served(new_store: StoreFactory, tail) -> None:  # type: ignore[no-untyped-def]
    """Bytes after the last valid record (garbage, half a record, an unpatched or corrupt one) are cut off."""
    store = new_store()
    results = _fill(store, 20, queues=1)
    end = store.commitlog.max_offset
    junk = tail(store, results)
    _crash(store)
    _patch_file(_commitlog_file(store, end), end % FILE, junk)
    store = new_store()
    rep = store.recovery
    assert rep is not None and rep.commitlog_end == end and rep.truncated_bytes == len(junk.rstrip(b"\0"))
    assert _commitlog_file(store, end).read_bytes()[end % FILE : end % FILE + len(junk)] == bytes(len(junk))
    _assert_intact(store, results)
    assert store.read_record(end) is None
    nxt = store.put("T", 0, keyed(50))[0]
    assert nxt.physical_offset == end and nxt.queue_offset == 20
    assert parse_record(store.read_record(end), check_crc=True).queue_offset == 20  # type: ignore[arg-type]


def test_consume_queue_entries_past_the_commitlog_end_are_dropped(new_store: StoreFactory) -> None:
    """Records lost from the commitlog tail take their consume-queue entries with them."""
    store = new_store()
    results = _fill(store, 20, queues=1)
    _crash(store)
    lost = results[-3:]
    path = _commitlog_file(store, lost[0].physical_offset)
    _patch_file(path, lost[0].physical_offset % FILE, bytes(sum(r.size for r in lost)))
    store = new_store()
    rep = store.recovery
    assert rep is not None and rep.commitlog_end == lost[0].physical_offset and rep.dropped_cq_entries == 3
    assert store.max_offset("T", 0) == 17
    assert [r.physical_offset for r in read_queue(store, "T", 0)] == _expected(results[:-3], 0)
    assert store.put("T", 0, keyed(99))[0].queue_offset == 17


def test_missing_consume_queue_and_index_entries_are_redispatched(new_store: StoreFactory) -> None:
    """A crash between the commitlog write and the queue/index writes is repaired by re-dispatch."""
    store = new_store(index_max_entries=1000)
    results = _fill(store, 30, queues=1)
    _crash(store)
    cq_file = store.root / "consumequeue" / "T" / "0" / f"{16 * 20:020d}"  # entries 16..31
    _patch_file(cq_file, (25 - 16) * 20, bytes(5 * 20))  # entries 25..29 never written
    index_file = next((store.root / "index").iterdir())
    with open(index_file, "r+b") as f:  # the last 4 entries written but not counted
        f.seek(36)
        count = struct.unpack("<i", f.read(4))[0]
        f.seek(36)
        f.write(struct.pack("<i", count - 4))
    store = new_store(index_max_entries=1000)
    rep = store.recovery
    assert rep is not None and rep.abnormal
    assert rep.redispatched_cq == 5 and rep.rolled_back_index == 4 and rep.redispatched_index == 2
    assert store.max_offset("T", 0) == 30
    _assert_intact(store, results)
    for i in (27, 28, 29):
        assert len(store.query_by_key("T", f"K{i}")) == len(store.query_by_key("T", f"U{i}")) == 1


def test_torn_consume_queue_entries_are_repaired(new_store: StoreFactory) -> None:
    """Recent consume-queue entries are checked against the commitlog: a hole or a torn entry is fixed."""
    store = new_store()
    results = _fill(store, 30, queues=1)
    _crash(store)
    cq_file = store.root / "consumequeue" / "T" / "0" / f"{16 * 20:020d}"
    _patch_file(cq_file, (20 - 16) * 20, bytes(20))  # a hole: entry 20
    _patch_file(cq_file, (22 - 16) * 20 + 8, struct.pack(">i", 7))  # a wrong size: entry 22
    store = new_store()
    rep = store.recovery
    assert rep is not None and rep.repaired_cq == 2
    _assert_intact(store, results)


def test_delayed_message_is_redispatched_with_its_delivery_time(new_put_path: PutPathFactory) -> None:
    """A schedule-queue entry lost in a crash comes back with tags code = store time + the level's delay."""
    path = new_put_path()
    store = path.store
    res = path.put("T", 0, record("T", b"later", delay=2, uniq="D"))[0]
    _crash(store)
    cq_file = store.root / "consumequeue" / SCHEDULE_TOPIC / "1" / f"{0:020d}"
    _patch_file(cq_file, 0, bytes(20))
    store = new_put_path().store
    assert store.recovery is not None and store.recovery.redispatched_cq == 1
    assert store.queues[(SCHEDULE_TOPIC, 1)].entry(0) == (
        res.physical_offset,
        res.size,
        res.store_timestamp + 5000,
    )


def test_leftover_preallocated_file_after_a_crash(new_store: StoreFactory) -> None:
    """An empty file the warmer created ahead is dropped or reused after a crash; offsets stay right."""
    store = new_store()
    results = _fill(store, 25, queues=1)
    mfq = store.commitlog.mfq
    # (None from preallocate_next: the warmer made it meanwhile)
    nxt = mfq.next_file or mfq.preallocate_next() or mfq.next_file
    assert nxt is not None
    _crash(store)
    assert (store.root / "commitlog" / nxt.path.name).exists()
    store = new_store()
    _assert_intact(store, results)
    more = store.put("T", 0, b"".join(keyed(i, size=300) for i in range(100, 160)))
    assert [r.queue_offset for r in more] == list(range(25, 85))
    assert len(read_queue(store, "T", 0)) == 85


def test_second_store_on_the_same_directory_is_refused(new_store: StoreFactory, tmp_path: Path) -> None:
    """The lock file stops a second store from opening the directory until the first lets go."""
    store = new_store()
    with pytest.raises(StoreLockedError, match="in use"):
        new_store()
    store.shutdown()
    again = new_store()
    assert again.running and again.recovery is not None and not again.recovery.abnormal


def test_index_uncounted_entries_restore_the_slots(new_store: StoreFactory) -> None:
    """Entries past the header count are undone at load, restoring each slot's previous head."""
    store = new_store(index_max_entries=1000)
    store.put("T", 0, b"".join(record("T", b"x", keys=[f"k{i}"]) for i in range(20)))
    _crash(store)
    path = next((store.root / "index").iterdir())
    before = path.read_bytes()
    store = new_store(index_max_entries=1000)
    assert store.recovery is not None and store.recovery.rolled_back_index == 0
    _crash(store)
    raw = bytearray(before)
    struct.pack_into("<i", raw, 36, 11)  # pretend the batch's last 10 entries were never counted
    path.write_bytes(bytes(raw))
    store = new_store(index_max_entries=1000)
    assert store.recovery is not None and store.recovery.rolled_back_index == 10
    assert store.recovery.redispatched_index == 10
    for i in range(20):
        assert len(store.query_by_key("T", f"k{i}")) == 1
    entries_base = HEADER_SIZE + 4 * 8
    f = store.index.files[0]
    assert all(0 <= f.slot_view[s] < f.count for s in range(8)) and f.count == 21
    assert os.path.getsize(path) == entries_base + 20 * 1000


def test_index_file_killed_before_its_header_is_dropped(new_store: StoreFactory) -> None:
    """An index file created but never written (kill -9 right after creation) is dropped, and its keys re-indexed."""
    store = new_store(index_max_entries=1000)
    store.put("T", 0, b"".join(record("T", b"x", keys=[f"k{i}"]) for i in range(5)))
    _crash(store)
    path = next((store.root / "index").iterdir())
    path.write_bytes(bytes(path.stat().st_size))  # right size, nothing written: the header is all zeros
    store = new_store(index_max_entries=1000)
    assert store.recovery is not None and store.recovery.abnormal
    assert not path.exists() or path.read_bytes()[:40] != bytes(40)
    for i in range(5):
        assert len(store.query_by_key("T", f"k{i}")) == 1


def test_entries_of_files_still_being_made_are_redispatched(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash while new queues' files are still being made (their entries only in memory) loses
    nothing: the logics flush held the checkpoint back, and recovery re-dispatches the entries."""
    store = new_store()
    before = _fill(store, 30)
    store.flush_logics()  # the queues so far are on disk, the checkpoint covers them
    maker = store.map_pool.maker
    assert maker is not None
    monkeypatch.setattr(maker, "submit", lambda mf: setattr(mf, "making", file_maker.QUEUED))  # never made
    late = store.put("T", 7, b"".join(keyed(j, size=300) for j in range(100, 105)))
    assert store.map_pool.pending and [r.queue_offset for r in read_queue(store, "T", 7)] == list(range(5))
    logics_ts = store.checkpoint.logics_ts
    store.flush_logics(settle=False)  # the periodic pass: must not claim the pending entries
    assert store.queues[("T", 7)] in store.dirty_queues and store.checkpoint.logics_ts == logics_ts
    store.halt()
    assert not (store.root / "consumequeue" / "T" / "7").exists()
    store = new_store()
    rep = store.recovery
    assert rep is not None and rep.abnormal and rep.redispatched_cq == 5
    _assert_intact(store, before + late)


def test_a_file_that_cannot_be_made_at_shutdown_leaves_a_crash_behind(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a pending consume-queue file cannot be made at shutdown, the shutdown is not marked
    clean (no queue ends, abort file kept): the next start re-dispatches its entries."""
    store = new_store()
    maker = store.map_pool.maker
    assert maker is not None
    monkeypatch.setattr(maker, "submit", lambda mf: None)
    results = store.put("T", 0, b"".join(keyed(j, size=300) for j in range(3)))

    def refuse(self: PooledMappedFile) -> tuple[memoryview, int]:
        raise StoreError("no room")

    monkeypatch.setattr(PooledMappedFile, "create_mapping", refuse)
    store.shutdown()
    assert (store.root / "abort").exists() and not (store.root / "queue_ends").exists()
    monkeypatch.undo()
    store = new_store()
    rep = store.recovery
    assert rep is not None and rep.abnormal and rep.redispatched_cq == 3
    _assert_intact(store, results)
