"""SYNC_FLUSH through the C syncer, store side: planning a sync, recording it, and mappings that outlive closes.

:meth:`MessageStore.sync_plan` gives the page-aligned ranges of everything written and not
flushed (one per commitlog file), :meth:`MessageStore.sync_done` records a finished one as the
flusher thread records its own syncs (flushed positions only move forward), and a plan keeps
its mappings mapped until the syncer is done with them, whatever closes the files meanwhile.
"""

from __future__ import annotations

import ctypes
import mmap
import select

import pytest

from pymq.broker.store import MessageStore
from pymq.broker.store.sync_plan import SyncPlan
from pymq.config import FlushDiskType
from tests.store.conftest import StoreFactory
from tests.store.storeutil import keyed, use_c_syncer

#: SYNC_FLUSH, 64 KiB commitlog files, no periodic flush in the way
SYNC = {
    "flush_disk_type": FlushDiskType.SYNC_FLUSH,
    "commitlog_file_size": 64 * 1024,
    "flush_interval_ms": 60_000,
    "flush_thorough_interval_ms": 60_000,
}
PAGE = mmap.PAGESIZE


@pytest.fixture(autouse=True)
def c_syncer(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the C syncer (see storeutil.use_c_syncer)."""
    use_c_syncer(monkeypatch)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def msync_errno(address: int, length: int) -> int:
    """msync(MS_SYNC) of a range right here: 0, or the errno (ENOMEM: not mapped)."""
    return 0 if _libc.msync(address, length, 4) == 0 else ctypes.get_errno()


def put(store: MessageStore, count: int, size: int = 1000) -> int:
    """``count`` records of about ``size`` bytes; returns the commitlog end."""
    for i in range(count):
        store.put("T", i % 2, keyed(i, size=size))
    return store.commitlog.max_offset


def run_job(store: MessageStore, plan: SyncPlan) -> int:
    """Sync a plan on the store's C syncer; returns its errno (0: synced)."""
    syncer = store.syncer
    assert syncer is not None
    syncer.submit(plan, plan.ranges)
    assert select.select([syncer.fileno()], [], [], 10)[0], "the syncer did not answer"
    ((token, err),) = syncer.take()
    assert token is plan
    return int(err)


def test_a_plan_covers_the_unflushed_bytes_of_each_file_page_aligned(new_store: StoreFactory) -> None:
    store = new_store(**SYNC)
    assert store.syncer is not None  # SYNC_FLUSH with the accelerator: the store made one
    flushed = store.flushed_offset
    end = put(store, 100)  # ~100 KB: into the second 64 KiB file
    first, second = store.commitlog.mfq.files
    assert second.wrote_pos > 0 and flushed < first.file_to
    plan = store.sync_plan(end)
    assert plan is not None and plan.end == end
    start = flushed - flushed % PAGE
    assert plan.ranges == [(first.address + start, first.wrote_pos - start), (second.address, second.wrote_pos)]
    assert all(addr % PAGE == 0 for addr, _ in plan.ranges)
    assert store.flushed_offset == flushed  # planning records nothing
    assert run_job(store, plan) == 0
    assert store.sync_done(plan, True)
    assert store.flushed_offset == end
    assert store.checkpoint.flushed_phys == end and store.checkpoint.physic_ts == store.last_store_ts
    assert not plan.pins
    assert store.sync_plan(end) is None  # durable already
    put(store, 1)
    nxt = store.sync_plan(end + 1)  # "at least up to": the plan covers whatever is written
    assert nxt is not None and nxt.end == store.commitlog.max_offset
    assert nxt.ranges[0][0] == second.address + (second.flushed_pos - second.flushed_pos % PAGE)
    nxt.release()


def test_recording_never_moves_flushed_offsets_back(new_store: StoreFactory) -> None:
    """The flusher thread synced past a plan before it was recorded: the plan records nothing older."""
    store = new_store(**SYNC)
    first_end = put(store, 10)
    plan = store.sync_plan(first_end)
    assert plan is not None
    assert run_job(store, plan) == 0
    end = put(store, 80)
    flusher = store.services.flusher
    assert flusher is not None
    flusher._flush_once(force=True)  # the periodic flush, now: everything, into the second file
    ts = store.checkpoint.physic_ts
    assert store.flushed_offset == store.checkpoint.flushed_phys == end
    assert store.sync_done(plan, True)
    assert store.flushed_offset == store.checkpoint.flushed_phys == end
    assert store.checkpoint.physic_ts == ts
    assert [mf.flushed_pos for mf in store.commitlog.mfq.files] == [mf.wrote_pos for mf in store.commitlog.mfq.files]


def test_a_failed_or_late_sync_records_nothing(new_store: StoreFactory) -> None:
    store = new_store(**SYNC)
    flushed = store.flushed_offset
    end = put(store, 10)
    plan = store.sync_plan(end)
    assert plan is not None
    assert store.sync_done(plan, False)  # the syncer reported an errno
    assert store.flushed_offset == flushed and not plan.pins
    plan = store.sync_plan(end)
    assert plan is not None
    with store.file_lock:  # the flusher thread is syncing: the loop does not wait for it
        assert not store.sync_done(plan, True, blocking=False)
    assert store.sync_done(plan, True, blocking=False)
    assert store.flushed_offset == end


def test_a_truncation_after_planning_keeps_the_plan_from_recording(new_store: StoreFactory) -> None:
    """HA truncation (or a failed put's undo) between plan and record: later data must not count as synced."""
    store = new_store(**SYNC)
    put(store, 3)
    r = store.put("T", 0, keyed(99))[0]
    end = put(store, 3)
    plan = store.sync_plan(end)
    assert plan is not None
    assert run_job(store, plan) == 0
    store.truncate_to(r.physical_offset)
    put(store, 5)  # new bytes where the plan synced old ones
    assert store.sync_done(plan, True)
    assert store.flushed_offset <= r.physical_offset


@pytest.mark.parametrize("stop", ["shutdown", "halt"])
def test_stopping_the_store_with_a_job_in_flight_keeps_its_mappings(new_store: StoreFactory, stop: str) -> None:
    """The store closes its files while the syncer works on them: the job completes, nothing is unmapped under it."""
    store = new_store(**SYNC)
    end = put(store, 100, size=1000)
    plan = store.sync_plan(end)
    assert plan is not None and store.syncer is not None
    store.syncer.submit(plan, plan.ranges)
    getattr(store, stop)()  # closes the files (and the syncer: queued jobs finish first)
    assert all(mf.closed for mf in store.commitlog.mfq.files)
    ((token, err),) = store.syncer.take()
    assert token is plan and err == 0
    assert all(msync_errno(a, n) == 0 for a, n in plan.ranges)  # still mapped: the plan pins them
    assert not any(mf.mm.closed for mf, _ in plan.files)
    assert store.sync_done(plan, True)  # (a stopped store records nothing)
    assert all(mf.mm.closed for mf, _ in plan.files)  # released: unmapped now


def test_deleting_a_file_with_a_job_in_flight_waits_for_the_job(new_store: StoreFactory) -> None:
    """A truncation deletes a file the job syncs (HA): unlinked at once, unmapped only when the job is over."""
    store = new_store(**SYNC)
    put(store, 10)
    r = store.put("T", 0, keyed(7))[0]
    end = put(store, 60)
    plan = store.sync_plan(end)
    assert plan is not None and len(plan.ranges) == 2
    second = store.commitlog.mfq.files[1]
    assert r.physical_offset < second.file_from
    store.truncate_to(r.physical_offset)  # in the first file: the second is deleted
    assert second.closed and second not in store.commitlog.mfq.files  # (the warmer may make its name anew)
    assert run_job(store, plan) == 0
    assert msync_errno(*plan.ranges[1]) == 0 and not second.mm.closed
    assert store.sync_done(plan, True)
    assert second.mm.closed  # unmapped once the plan let go
    assert store.flushed_offset <= r.physical_offset
