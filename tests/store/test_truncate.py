"""MessageStore.truncate_to: what a slave does to a tail its new master lacks.

The truncated store must equal a store that only ever received the bytes before the cut
(same commitlog, consume queues and index lookups), take the rest again with append_raw,
and survive a restart in that state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.broker.store import MessageStore
from pymq.errors import StoreError
from tests.store.conftest import PutPathFactory, StoreFactory
from tests.store.storeutil import commitlog_bytes, keyed, put_mixed, queue_entries, record_cuts


def _keys(store: MessageStore, topic: str, keys: list[str]) -> dict[str, list[bytes]]:
    return {k: [bytes(r) for r in store.query_by_key(topic, k)] for k in keys}


def test_truncate_equals_a_store_that_never_had_the_tail(new_put_path: PutPathFactory, tmp_path: Path) -> None:
    a = new_put_path(tmp_path / "a")
    put_mixed(a.put, 90)
    data = commitlog_bytes(a.store)
    cuts = record_cuts(a.store)
    # One cut mid-file, one exactly at a file start (after a blank marker).
    mid = cuts[len(cuts) // 2]
    file_start = a.store.commitlog.mfq.files[2].file_from
    keys = [f"U{i}" for i in range(0, 90, 3)] + [f"K{1000 + i}" for i in range(1, 90, 3)]
    for n, cut in enumerate((mid, file_start)):
        s = new_put_path(tmp_path / f"s{n}").store
        s.append_raw(0, data)
        ref = new_put_path(tmp_path / f"ref{n}").store
        ref.append_raw(0, data[:cut])
        assert s.truncate_to(cut) == len(data) - cut
        assert s.commitlog.max_offset == cut
        assert commitlog_bytes(s) == data[:cut]
        assert queue_entries(s) == queue_entries(ref)
        for topic in ("T", "U"):
            assert _keys(s, topic, keys) == _keys(ref, topic, keys)
        # The rest comes back with append_raw, and the store equals the original.
        s.append_raw(cut, data[cut:])
        assert commitlog_bytes(s) == data
        assert queue_entries(s) == queue_entries(a.store)
        for topic in ("T", "U"):
            assert _keys(s, topic, keys) == _keys(a.store, topic, keys)


def test_truncate_survives_restart_and_refuses_non_boundaries(new_store: StoreFactory, tmp_path: Path) -> None:
    root = tmp_path / "t"
    s = new_store(root)
    phys = [s.put("T", i % 2, keyed(i, size=300))[0].physical_offset for i in range(40)]
    first = s.commitlog.read_record(0)
    assert first is not None
    with pytest.raises(StoreError):
        s.truncate_to(len(first) + 5)  # inside a record
    with pytest.raises(StoreError):
        s.truncate_to(s.commitlog.max_offset + 1)
    assert s.truncate_to(s.commitlog.max_offset) == 0
    cut = phys[11]
    s.truncate_to(cut)
    kept = (s.max_offset("T", 0), s.max_offset("T", 1))
    assert kept == (6, 5)
    assert [bytes(r) for r in s.query_by_key("T", "U20")] == []
    s.shutdown()
    again = new_store(root)
    assert again.commitlog.max_offset == cut
    assert (again.max_offset("T", 0), again.max_offset("T", 1)) == kept
    assert [bytes(r) for r in again.query_by_key("T", "U20")] == []
    assert len(again.query_by_key("T", "U10")) == 1
    # Writes continue at the cut.
    res = again.put("T", 0, keyed(99))
    assert res[0].physical_offset == cut and res[0].queue_offset == 6


def test_an_empty_replica_starts_at_the_masters_oldest_file(new_put_path: PutPathFactory, tmp_path: Path) -> None:
    """MessageStore.start_at: a new slave of a master whose first files were cleaned up."""
    a = new_put_path(tmp_path / "a")
    put_mixed(a.put, 90)
    master = a.store
    assert master.delete_commitlog_files(2) == 2
    master.delete_orphaned_logics()
    start = master.commitlog.min_offset
    assert start > 0
    replica = new_put_path(tmp_path / "r").store
    with pytest.raises(StoreError):
        replica.start_at(start + 1)
    replica.start_at(start)
    replica.append_raw(start, commitlog_bytes(master, start))
    assert replica.commitlog.min_offset == start
    assert replica.commitlog.max_offset == master.commitlog.max_offset
    for key, cq in master.queues.items():
        r = replica.queues.get(key)
        if cq.max_offset == 0:
            continue
        assert r is not None and r.max_offset == cq.max_offset, key
        # What the master still serves, the replica serves the same.
        got_m = master.get_messages("g", key[0], key[1], cq.min_offset, 4)
        got_r = replica.get_messages("g", key[0], key[1], cq.min_offset, 4)
        assert [bytes(b) for b in got_r.buffers] == [bytes(b) for b in got_m.buffers], key
    with pytest.raises(StoreError):
        replica.start_at(0)  # no longer empty
