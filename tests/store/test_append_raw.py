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
from tests.store.storeutil import keyed, record


def _fill(put, count: int) -> None:  # type: ignore[no-untyped-def]
    """Records of two topics over several queues, with keys, tags and a few delayed ones."""
    for i in range(count):
        topic = "T" if i % 3 else "U"
        batch = keyed(i, topic, size=200 + i % 7 * 60) + keyed(1000 + i, topic)
        if i % 10 == 5:
            batch += record(topic, b"later", delay=2, uniq=f"D{i}")
        put(topic, i % 4, batch)


def _queues(store: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int] | None]]:
    return {
        key: [cq.entry(i) for i in range(cq.min_offset, cq.max_offset)]
        for key, cq in sorted(store.queues.items())
        if cq.max_offset
    }


def _commitlog_bytes(store: MessageStore, start: int = 0) -> bytes:
    views = store.read_commitlog(start, store.commitlog.max_offset - start)
    return b"".join(bytes(v) for v in views)


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
    _fill(a.put, 90)
    master = a.store
    data = _commitlog_bytes(master)
    assert len(master.commitlog.mfq.files) >= 4
    # B has the broker's put hooks too (the schedule topic's tags rule); it never puts itself.
    replica = new_put_path(tmp_path / "slave").store
    # Pieces that end mid-file and at file ends alike, each a whole number of records or blank.
    cuts = _record_cuts(master)
    offset = 0
    for end in cuts:
        assert replica.append_raw(offset, data[offset:end]) == end
        offset = end
    assert offset == master.commitlog.max_offset
    assert _commitlog_bytes(replica) == data
    assert _queues(replica) == _queues(master)
    assert (SCHEDULE_TOPIC, 1) in _queues(replica)
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
    data = _commitlog_bytes(store)
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
    assert replica.commitlog.max_offset == 0 and not _queues(replica)
    assert replica.append_raw(0, data) == len(data)
    assert _queues(replica) == _queues(store)


def _record_cuts(store: MessageStore) -> list[int]:
    """Offsets to cut the commitlog at: every few records, and each file's end."""
    cuts = []
    for n, (mf, pos, size, *_rest) in enumerate(store.commitlog.scan(0, False)):
        if n % 7 == 6:
            cuts.append(mf.file_from + pos + size)
    cuts += [mf.file_to for mf in store.commitlog.mfq.files[:-1]]
    cuts.append(store.commitlog.max_offset)
    return sorted(set(cuts))


def test_append_raw_waits_while_puts_are_refused(store: MessageStore, new_store: StoreFactory, tmp_path: Path) -> None:
    """A slave whose consume-queue files are not being made (or whose disk is full) stores nothing more
    until that clears: replication retries rather than queueing entries without bound."""
    for i in range(5):
        store.put("T", 0, keyed(i))
    data = _commitlog_bytes(store)
    replica = new_store(tmp_path / "replica")
    replica.set_queue_file_backlog("250,000 consume-queue files wait to be made")
    with pytest.raises(StoreError, match="consume-queue files wait to be made"):
        replica.append_raw(0, data)
    replica.set_queue_file_backlog(None)
    replica.disk_full = True
    with pytest.raises(StoreError, match="not storing replicated data"):
        replica.append_raw(0, data)
    assert replica.commitlog.max_offset == 0 and not _queues(replica)
    replica.disk_full = False
    assert replica.append_raw(0, data) == len(data)
    assert _queues(replica) == _queues(store)
