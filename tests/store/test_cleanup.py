"""Cleanup: expired commitlog files, disk-pressure deletion, and the queues and index files that follow."""

from __future__ import annotations

import errno
import os
import threading
import time
from typing import NamedTuple

import pytest

from pymq.broker.store import GetStatus, MessageStore, PutStatus, file_maker
from pymq.broker.store.map_pool import FD_LESS, PooledMappedFile
from pymq.errors import StoreError
from tests.helpers import CheckedThread
from tests.store.conftest import StoreFactory
from tests.store.storeutil import fill, keyed, other_hour, quiet, read_queue, this_hour

HOUR = 3600.0


def age(store: MessageStore, count: int, hours: float, now: float) -> None:
    """Make the first ``count`` commitlog files look ``hours`` old."""
    for mf in store.commitlog.mfq.files[:count]:
        t = now - hours * HOUR
        os.utime(mf.path, (t, t))


def test_expired_files_go_at_the_delete_hour(new_store: StoreFactory) -> None:
    """At a delete_when hour, commitlog files older than file_reserved_hours are deleted, oldest first."""
    now = time.time()
    store = quiet(new_store(delete_when=this_hour(now), file_reserved_hours=72))
    fill(store, 5)
    age(store, 2, 100, now)
    first_two = [mf.path for mf in store.commitlog.mfq.files[:2]]
    report = store.run_cleanup(now=now)
    assert report.deleted_commitlog_files == 2
    assert not any(p.exists() for p in first_two)
    assert store.commitlog.min_offset == 2 * store.config.commitlog_file_size


def test_expired_files_stay_outside_the_delete_hour(new_store: StoreFactory) -> None:
    """Outside the delete hours and with the disk below 75 %, even expired files are kept."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now), simulated_disk_capacity=10**9))
    fill(store, 4)
    age(store, 3, 100, now)
    assert store.run_cleanup(now=now).deleted_commitlog_files == 0
    assert len(store.commitlog.mfq.files) == 4


def test_over_75_percent_deletes_expired_files_at_once(new_store: StoreFactory) -> None:
    """Above disk_max_used_ratio, expired files go outside the delete hours; unexpired ones stay."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now)))
    fill(store, 6)
    age(store, 2, 100, now)
    store.config.simulated_disk_capacity = int(store.disk_bytes() / 0.80)
    report = store.run_cleanup(now=now)
    assert report.deleted_commitlog_files == 2 and len(store.commitlog.mfq.files) == 4
    assert not store.disk_full


def test_over_85_percent_deletes_oldest_files_even_if_not_expired(new_store: StoreFactory) -> None:
    """Above disk_clean_forcibly_ratio the oldest files go, unexpired, until use drops below it."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now)))
    fill(store, 8)
    newest = store.commitlog.mfq.files[-1]
    store.config.simulated_disk_capacity = int(store.disk_bytes() / 0.95)
    report = store.run_cleanup(now=now)
    assert report.deleted_commitlog_files >= 1
    assert report.disk_ratio < 0.85 and store.disk_ratio() < 0.85
    assert store.commitlog.mfq.files[-1] is newest and not store.disk_full


def test_the_newest_file_is_never_deleted(new_store: StoreFactory) -> None:
    """Even a full disk and an expired file never cost the file being written."""
    now = time.time()
    store = quiet(new_store(delete_when=this_hour(now)))
    fill(store, 1)
    age(store, 1, 1000, now)
    store.config.simulated_disk_capacity = store.disk_bytes()
    store.run_cleanup(now=now)
    assert len(store.commitlog.mfq.files) == 1 and store.disk_full


def test_queues_and_index_follow_the_commitlog(new_store: StoreFactory) -> None:
    """After commitlog files go, consume-queue and index files that pointed only into them go too,
    and min offsets move forward."""
    now = time.time()
    store = quiet(new_store(delete_when=this_hour(now), consume_queue_file_entries=8, index_max_entries=16))
    results = fill(store, 6)
    cq_dir = store.root / "consumequeue" / "T" / "0"
    cq_files_before = len(list(cq_dir.iterdir()))
    index_files_before = len(store.index.files)
    age(store, 3, 100, now)
    report = store.run_cleanup(now=now)
    assert report.deleted_commitlog_files == 3
    assert report.deleted_cq_files > 0 and report.deleted_index_files > 0
    assert len(list(cq_dir.iterdir())) < cq_files_before and len(store.index.files) < index_files_before
    min_phys = store.commitlog.min_offset
    gone = [r for r in results if r.physical_offset < min_phys]
    kept0 = [r for r in results if r.physical_offset >= min_phys and r.queue_id == 0]
    new_min = kept0[0].queue_offset
    assert store.min_offset("T", 0) == new_min
    res = store.get_messages("g", "T", 0, 0)
    assert (res.status, res.next_begin_offset, res.min_offset) == (
        GetStatus.OFFSET_TOO_SMALL,
        new_min,
        new_min,
    )
    assert [r.physical_offset for r in read_queue(store, "T", 0, new_min)] == [r.physical_offset for r in kept0]
    assert store.offset_by_time("T", 0, 0) == new_min and store.store_time_at("T", 0, 0) == 0
    assert store.read_record(gone[0].physical_offset) is None
    uniq = f"U{results.index(gone[-1])}"
    assert store.query_by_key("T", uniq) == []
    first_kept = next(r for r in results if r.physical_offset >= min_phys)
    assert first_kept.physical_offset == min_phys
    assert store.earliest_store_time() == first_kept.store_timestamp


def test_forcibly_ratio_of_one_never_deletes_unexpired_files(new_store: StoreFactory) -> None:
    """disk_clean_forcibly_ratio = 1.0 (its maximum) means never: a 100 % full disk refuses writes and
    keeps every unexpired file (ratios mean "above", and nothing is above 100 %)."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now), disk_clean_forcibly_ratio=1.0))
    fill(store, 6)
    store.config.simulated_disk_capacity = store.disk_bytes()  # exactly 100 %
    report = store.run_cleanup(now=now)
    assert report.deleted_commitlog_files == 0 and len(store.commitlog.mfq.files) == 6
    assert store.disk_full and store.commitlog.min_offset == 0


def test_forced_deletion_can_be_turned_off(new_store: StoreFactory) -> None:
    """clean_file_forcibly_enable = False: at 95 % nothing unexpired goes; writes are refused instead."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now), clean_file_forcibly_enable=False))
    fill(store, 8)
    store.config.simulated_disk_capacity = int(store.disk_bytes() / 0.95)
    report = store.run_cleanup(now=now)
    assert report.deleted_commitlog_files == 0 and len(store.commitlog.mfq.files) == 8
    assert store.disk_full
    assert store.put("T", 0, keyed(9999))[0].status == PutStatus.SERVICE_NOT_AVAILABLE


class _FakeStatvfs(NamedTuple):
    f_blocks: int
    f_bfree: int
    f_bavail: int
    f_frsize: int = 4096


def test_failing_preallocation_does_not_look_like_a_full_disk(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A posix_fallocate that fails (ENOSPC) holds its blocks until it gives up, so the file system
    looks 100 % full meanwhile: a cleanup pass measuring then must not delete unexpired files."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now), simulated_disk_capacity=None))  # the real statvfs path
    fill(store, 4)
    allocating = threading.Event()

    def failing_fallocate(fd: int, offset: int, length: int) -> None:
        allocating.set()
        time.sleep(0.3)
        allocating.clear()
        raise OSError(errno.ENOSPC, "No space left on device")

    def statvfs(path: object) -> _FakeStatvfs:
        # 100 % full while the doomed preallocation holds its blocks, 50 % otherwise
        return _FakeStatvfs(1000, 0, 0) if allocating.is_set() else _FakeStatvfs(1000, 500, 500)

    monkeypatch.setattr(os, "posix_fallocate", failing_fallocate)
    monkeypatch.setattr(os, "statvfs", statvfs)
    t = CheckedThread(store.commitlog.mfq.preallocate_next)
    t.start()
    assert allocating.wait(5)
    report = store.run_cleanup(now=now)
    with pytest.raises(StoreError, match="cannot allocate"):
        t.result()
    assert report.deleted_commitlog_files == 0 and len(store.commitlog.mfq.files) == 4
    assert report.disk_ratio == 0.5 and not store.disk_full


def test_expired_pending_queue_files_are_dropped_without_being_made(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue whose first files are still pending (the maker has not made them) and whose entries all
    point into deleted commitlog files: cleanup drops those files in memory, never creating a file
    only to delete it; a file the maker is creating right now is left for the next pass."""
    now = time.time()
    store = quiet(new_store(delete_when=this_hour(now), consume_queue_file_entries=4))
    maker = store.map_pool.maker
    if maker is None:  # (off Linux queue files are made at once)
        assert not FD_LESS
        return
    monkeypatch.setattr(maker, "submit", lambda mf: None)  # the thread never makes them
    created: list[str] = []
    create = PooledMappedFile.create_mapping

    def recording(self: PooledMappedFile) -> tuple[memoryview, int]:
        created.append(self.path.parent.parent.name)
        return create(self)

    monkeypatch.setattr(PooledMappedFile, "create_mapping", recording)
    store.put("Q", 0, b"".join(keyed(i, "Q") for i in range(10)))  # three files, all pending
    i = 0
    while len(store.commitlog.mfq.files) < 4:
        store.put("T", 0, keyed(i, size=400))
        i += 1
    cq = store.queues[("Q", 0)]
    first, second, third = cq.mfq.files
    assert all(mf.pending is not None for mf in (first, second, third))
    age(store, 2, 100, now)
    first.making = file_maker.MAKING  # as if the maker were creating it right now
    try:
        report = store.run_cleanup(now=now)
    finally:
        first.making = 0  # (closing a file being made waits for the maker: not at teardown)
    assert report.deleted_commitlog_files == 2 and cq.min_offset == 10  # every entry of Q points into them
    assert cq.mfq.files == [first, second, third]  # left for the next pass: cleanup does not wait for it
    store.delete_orphaned_logics()
    assert cq.mfq.files == [third] and first.closed and second.closed
    assert (cq.min_offset, cq.max_offset) == (10, 10)
    assert created == [], created  # nothing was made by cleanup
    assert not first.path.exists() and not second.path.exists() and third.pending is not None
    store.settle_queue_files()
    assert third.path.exists() and store.put("Q", 0, keyed(99, "Q"))[0].queue_offset == 10
    store.shutdown()
    again = new_store(consume_queue_file_entries=4)
    assert (again.min_offset("Q", 0), again.max_offset("Q", 0)) == (10, 11)
