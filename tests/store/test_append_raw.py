"""CommitLog.read across files, and append_raw: a second store fed another's commitlog bytes.

append_raw is what a slave will do with its master's bytes (the replication issue): the
records land at the same offsets and go through the same dispatcher, so the consume
queues and the index come out equal to the master's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.broker.delay.hook import SCHEDULE_TOPIC
from pymq.broker.store import MessageStore
from pymq.errors import StoreError
from tests.store.conftest import PutPathFactory, StoreFactory
from tests.store.storeutil import commitlog_bytes, keyed, put_mixed, queue_entries, record_cuts


def test_read_spans_files(store: MessageStore) -> None:
    """read(offset, size) returns one view per file, stops at the end of the data."""
    for i in range(120):
        store.put("T", 0, keyed(i, size=300))
    cl = store.commitlog
    files = cl.mfq.files
    assert len(files) >= 3
    start = files[0].file_to - 100
    views = cl.read(start, cl.file_size + 200)
    assert [len(v) for v in views] == [100, cl.file_size, 100]
    assert bytes(views[0]) == bytes(files[0].mm[files[0].size - 100 :])
    assert bytes(views[1]) == bytes(files[1].mm[:])
    tail = cl.read(cl.max_offset - 10, 1000)
    assert sum(len(v) for v in tail) == 10
    assert cl.read(cl.max_offset, 10) == []
    assert b"".join(bytes(v) for v in cl.read(0, cl.max_offset)) == b"".join(
        bytes(mf.mm[: mf.wrote_pos]) for mf in files
    )


def test_append_raw_rebuilds_the_same_queues_and_index(new_put_path: PutPathFactory, tmp_path: Path) -> None:
    """Feed store A's commitlog into an empty store B, in uneven pieces: B's queues and index equal A's."""
    a = new_put_path()
    put_mixed(a.put, 90)
    master = a.store
    data = commitlog_bytes(master)
    assert len(master.commitlog.mfq.files) >= 4
    # B has the broker's put hooks too (the schedule topic's tags rule); it never puts itself.
    replica = new_put_path(tmp_path / "slave").store
    # Pieces that end mid-file and at file ends alike, each a whole number of records or blank.
    cuts = record_cuts(master)
    offset = 0
    for end in cuts:
        assert replica.append_raw(offset, data[offset:end]) == end
        offset = end
    assert offset == master.commitlog.max_offset
    assert commitlog_bytes(replica) == data
    assert queue_entries(replica) == queue_entries(master)
    assert (SCHEDULE_TOPIC, 1) in queue_entries(replica)
    for key in ("U3", "K3", "U1050", "D5"):
        topic = "U" if key in ("U3", "K3") else ("T" if key == "U1050" else SCHEDULE_TOPIC)
        found_a = [bytes(r) for r in master.query_by_key(topic, key)]
        assert found_a and [bytes(r) for r in replica.query_by_key(topic, key)] == found_a


def test_append_raw_refuses_gaps_and_partial_records(
    store: MessageStore, new_store: StoreFactory, tmp_path: Path
) -> None:
    """Data must continue the commitlog exactly and hold whole, broker-stamped records; nothing is written otherwise."""
    for i in range(5):
        store.put("T", 0, keyed(i))
    data = commitlog_bytes(store)
    first = store.commitlog.read_record(0)
    assert first is not None
    size = len(first)
    replica = new_store(tmp_path / "replica")
    with pytest.raises(StoreError):
        replica.append_raw(size, data[size:])  # a gap: the commitlog ends at 0
    with pytest.raises(StoreError):
        replica.append_raw(0, data[: size + 10])  # ends inside a record
    with pytest.raises(StoreError):
        replica.append_raw(0, keyed(9))  # a producer's record: no broker block
    corrupt = bytearray(data)
    corrupt[size + 100] ^= 0xFF  # a body byte of the second record
    with pytest.raises(StoreError):
        replica.append_raw(0, bytes(corrupt))
    assert replica.commitlog.max_offset == 0 and not queue_entries(replica)
    assert replica.append_raw(0, data) == len(data)
    assert queue_entries(replica) == queue_entries(store)


def test_append_raw_waits_while_puts_are_refused(store: MessageStore, new_store: StoreFactory, tmp_path: Path) -> None:
    """A slave whose consume-queue files are not being made (or whose disk is full) stores nothing more
    until that clears: replication retries rather than queueing entries without bound."""
    for i in range(5):
        store.put("T", 0, keyed(i))
    data = commitlog_bytes(store)
    replica = new_store(tmp_path / "replica")
    replica.set_queue_file_backlog("250,000 consume-queue files wait to be made")
    with pytest.raises(StoreError, match="consume-queue files wait to be made"):
        replica.append_raw(0, data)
    replica.set_queue_file_backlog(None)
    replica.disk_full = True
    with pytest.raises(StoreError, match="not storing replicated data"):
        replica.append_raw(0, data)
    assert replica.commitlog.max_offset == 0 and not queue_entries(replica)
    replica.disk_full = False
    assert replica.append_raw(0, data) == len(data)
    assert queue_entries(replica) == queue_entries(store)


def test_append_raw_reports_the_written_end_before_building_the_queues(
    store: MessageStore, new_store: StoreFactory, tmp_path: Path
) -> None:
    """``written`` sees the new commitlog end while no consume-queue entry exists yet (a slave ACKs
    there); the entries are built after it, even when it raises."""
    for i in range(5):
        store.put("T", 0, keyed(i))
    data = commitlog_bytes(store)
    replica = new_store(tmp_path / "replica")
    seen: list[tuple[int, int, dict[tuple[str, int], list[tuple[int, int, int] | None]]]] = []
    end = replica.append_raw(0, data, lambda e: seen.append((e, replica.commitlog.max_offset, queue_entries(replica))))
    assert end == len(data)
    assert seen == [(len(data), len(data), {})]
    assert queue_entries(replica) == queue_entries(store)

    def fails(_end: int) -> None:
        raise ConnectionResetError("the master went away")

    for i in range(5, 8):
        store.put("T", 0, keyed(i))
    more = commitlog_bytes(store, end)
    with pytest.raises(ConnectionResetError):
        replica.append_raw(end, more, fails)
    assert replica.commitlog.max_offset == store.commitlog.max_offset
    assert queue_entries(replica) == queue_entries(store)
