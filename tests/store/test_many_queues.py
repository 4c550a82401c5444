"""Many queues: consume-queue files are mapped lazily without descriptors, behind an LRU, and a clean
restart restores the queues' ends without mapping them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pymq.broker.store.map_pool import FD_LESS, PooledMappedFile
from pymq.errors import StoreError
from tests.helpers import wait_until_sync
from tests.store.conftest import StoreFactory
from tests.store.storeutil import record

CHECK = Path(__file__).with_name("many_queues_check.py")


@pytest.mark.slow
def test_many_queues_under_a_low_descriptor_limit(tmp_path: Path) -> None:
    """5,000 queues with RLIMIT_NOFILE at 256 (in a child process): put, read, clean restart, crash restart.

    (``python tests/store/many_queues_check.py DIR 256 10000`` is the 10,000-queue run.)"""
    proc = subprocess.run(
        [sys.executable, str(CHECK), str(tmp_path / "store"), "256", "5000"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["maps_at_clean_restart"] == 0
    assert figures["evictions"] > 0  # 5,000 queues, at most ~2,000 mapped: the LRU worked
    assert figures["fds_at_end"] < 64
    assert not FD_LESS or figures["fds_after_first_touch"] < 64


def test_lru_unmaps_clean_files_and_remaps_on_read(new_store: StoreFactory) -> None:
    store = new_store(consume_queue_max_mapped_files=4, consume_queue_flush_interval_ms=3_600_000)
    for q in range(12):
        store.put("T", q, record("T", b"m%d" % q))
    store.settle_queue_files()  # (new files are made by the maker thread: all of them now)
    pool = store.map_pool
    # Written but not yet synced: nothing may be unmapped.
    assert len(pool) == 12 and pool.evictions == 0
    store.flush_logics()
    assert not store.dirty_queues
    store.put("U", 0, record("U", b"u"))
    store.settle_queue_files()  # maps one more: the oldest clean ones go
    assert len(pool) <= 4 and pool.evictions >= 9
    for q in range(12):
        got = store.get_messages("g", "T", q, 0)
        assert got.message_count == 1 and b"m%d" % q in bytes(got.buffers[0])
        assert len(pool) <= 5


def test_flush_syncs_only_written_queues(new_store: StoreFactory) -> None:
    store = new_store(consume_queue_flush_interval_ms=3_600_000)
    for q in range(8):
        store.put("T", q, record("T"))
    store.flush_logics()
    store.put("T", 3, record("T"))
    assert store.dirty_queues == {store.queues[("T", 3)]}
    store.flush_logics()
    assert not store.dirty_queues
    assert all(mf.flushed_pos == mf.wrote_pos for cq in store.queues.values() for mf in cq.mfq.files)


def test_clean_restart_restores_ends_without_mapping(new_store: StoreFactory, tmp_path: Path) -> None:
    store = new_store()
    for q in range(3):
        store.put("T", q, b"".join(record("T", b"x%d" % i) for i in range(q * 20 + 1)))
    ends = {q: (store.min_offset("T", q), store.max_offset("T", q)) for q in range(3)}
    store.shutdown()
    again = new_store()
    assert again.map_pool.maps == 0
    assert {q: (again.min_offset("T", q), again.max_offset("T", q)) for q in range(3)} == ends
    assert all(again.queues[("T", q)].restored for q in range(3))
    got = again.get_messages("g", "T", 2, 40)
    assert got.message_count == 1 and b"x40" in bytes(got.buffers[0])
    (r,) = again.put("T", 2, record("T", b"next"))
    assert r.queue_offset == ends[2][1]
    # The record is read once: a crash later must not find it.
    assert not (again.root / "queue_ends").exists()


def test_queue_ends_of_another_commitlog_range_are_not_trusted(new_store: StoreFactory) -> None:
    store = new_store()
    store.put("T", 0, b"".join(record("T") for _ in range(5)))
    store.shutdown()
    ends = store.root / "queue_ends"
    data = json.loads(ends.read_text())
    data["queues"] = [["T", 0, 0, 3]]  # a lie, but recorded for a different commitlog range
    data["commitlog"][1] += 1
    ends.write_text(json.dumps(data))
    again = new_store()
    assert again.max_offset("T", 0) == 5 and not again.queues[("T", 0)].restored


def test_a_view_outlives_its_files_eviction(new_store: StoreFactory) -> None:
    """Entries read from a consume-queue file stay readable after the pool unmaps that file."""
    store = new_store(consume_queue_max_mapped_files=1, consume_queue_flush_interval_ms=3_600_000)
    store.put("T", 0, record("T", b"first"))
    cq = store.queues[("T", 0)]
    store.flush_logics()
    raw = cq.read_entries(0, 1)
    mf = cq.mfq.files[0]
    store.put("T", 1, record("T", b"second"))
    store.settle_queue_files()  # maps another file: the first one goes
    assert not mf.mapped and store.map_pool.evictions >= 1
    assert bytes(raw) == bytes(cq.read_entries(0, 1)) and len(raw) == 20  # still the mapping it came from


def test_new_queue_files_are_made_off_the_writers_thread(new_store: StoreFactory) -> None:
    """A new queue's first entries wait in memory (readable) while the maker thread creates its file."""
    store = new_store(consume_queue_flush_interval_ms=3_600_000)
    pool = store.map_pool
    maker = pool.maker
    if maker is None:  # (off Linux files are made at once)
        assert not FD_LESS
        return
    with maker.cond:  # the maker cannot take the file before we looked at it
        store.put("N", 0, record("N", b"first"))
        (mf,) = store.queues[("N", 0)].mfq.files
        assert mf.pending is not None and not mf.path.exists()
        got = store.get_messages("g", "N", 0, 0)
        assert got.message_count == 1 and b"first" in bytes(got.buffers[0])
    wait_until_sync(lambda: not pool.pending, timeout=30, what="the maker thread")
    assert mf.mapped and mf.path.exists() and maker.made >= 1
    store.put("N", 0, record("N", b"second"))
    store.flush_logics(settle=False)
    assert not store.dirty_queues
    with open(mf.path, "rb") as f:  # both entries on disk, in the made file
        assert f.read(40) == bytes(mf.view()[:40]) and bytes(mf.view()[20:40]) != bytes(20)
    assert bytes(store.get_messages("g", "N", 0, 0).buffers[0]).count(b"first") == 1


def test_pending_files_are_made_by_truncation_and_cancelled_by_deletion(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = new_store()
    maker = store.map_pool.maker
    if maker is None:
        return
    monkeypatch.setattr(maker, "submit", lambda mf: None)  # the thread never sees them
    store.put("N", 0, b"".join(record("N", b"m%d" % i) for i in range(3)))
    store.put("D", 0, record("D"))
    cq = store.queues[("N", 0)]
    assert len(store.map_pool.pending) == 2
    cq.truncate_to(2)  # trimmed in memory: truncation never creates a file (that could fail halfway)
    (mf,) = cq.mfq.files
    assert mf.pending is not None and not mf.path.exists() and cq.max_offset == 2 and mf.wrote_pos == 40
    assert store.get_messages("g", "N", 0, 0).message_count == 2
    store.delete_topic("D")
    assert store.map_pool.pending == {mf} and not (store.root / "consumequeue" / "D").exists()
    store.shutdown()  # makes the pending file
    assert mf.path.exists()
    again = new_store()
    assert again.get_messages("g", "N", 0, 0).message_count == 2 and again.queues[("N", 0)].max_offset == 2


def test_a_queues_files_reach_the_disk_in_order_when_making_one_fails(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The maker retries a failed file before any later one: a queue never has a later file on disk
    without the earlier ones, so a crash then loses no acknowledged entry."""
    store = new_store(consume_queue_file_entries=4, consume_queue_flush_interval_ms=3_600_000)
    maker = store.map_pool.maker
    if maker is None:
        return
    made: list[str] = []
    failed: list[str] = []
    create = PooledMappedFile.create_mapping

    def flaky(self: PooledMappedFile) -> tuple[memoryview, int]:
        if self.path.parent.parent.name == "Q" and not failed:
            failed.append(self.path.name)
            raise StoreError("no space left on device (test)")
        result = create(self)
        if self.path.parent.parent.name == "Q":
            made.append(self.path.name)
        return result

    monkeypatch.setattr(PooledMappedFile, "create_mapping", flaky)
    with maker.cond:  # three pending files of one queue, queued in order
        store.put("Q", 0, b"".join(record("Q", b"m%d" % i) for i in range(10)))
        assert len(store.queues[("Q", 0)].mfq.files) == 3
    wait_until_sync(lambda: not store.map_pool.pending, timeout=30, what="the maker thread")
    assert made == sorted(made) and made[0] == failed[0], (failed, made)
    store.halt()  # a crash: recovery rebuilds what was not flushed, from the first file on
    again = new_store(consume_queue_file_entries=4)
    got = again.get_messages("g", "Q", 0, 0, 32)
    assert got.message_count == 10 and again.queues[("Q", 0)].min_offset == 0


def test_making_a_pending_file_now_makes_its_queues_earlier_pending_files_first(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = new_store(consume_queue_file_entries=4)
    maker = store.map_pool.maker
    if maker is None:
        return
    monkeypatch.setattr(maker, "submit", lambda mf: None)  # the thread never sees them
    store.put("Q", 0, b"".join(record("Q", b"m%d" % i) for i in range(10)))
    first, second, third = store.queues[("Q", 0)].mfq.files
    third.view()  # e.g. a repair writing into the last file
    assert first.path.exists() and second.path.exists() and third.path.exists()
    assert not store.map_pool.pending
