"""SYNC_FLUSH with several sync threads: claimed ranges, the contiguous synced prefix, the shared file lock.

The bookkeeping (:class:`SyncRanges`) is checked alone, including random interleavings
against a model of which bytes were really synced; the flusher is checked on a real store
whose ``sync_range`` is wrapped to record every range synced and to hold one sync open.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from pymq.broker.store.shared_lock import SharedLock
from pymq.broker.store.sync_ranges import Claim, SyncRanges
from pymq.config import FlushDiskType
from tests.helpers import wait_until_sync
from tests.store.conftest import StoreFactory
from tests.store.storeutil import keyed

# --- SyncRanges ------------------------------------------------------------------------------------


def test_ranges_finishing_out_of_order_count_only_as_a_prefix() -> None:
    r = SyncRanges(100)
    a = r.claim(200, ts=1)
    b = r.claim(300, ts=2)
    assert a is not None and b is not None
    assert (a.start, a.end, b.start, b.end) == (100, 200, 200, 300)
    assert r.claim(300, ts=3) is None  # nothing new below 300
    assert r.finish(b, ok=True) is False and r.durable == 100  # a still runs: 200..300 cannot count
    assert r.finish(a, ok=True) is True
    assert (r.durable, r.durable_ts, r.in_flight) == (300, 2, 0)


def test_a_failed_range_is_claimed_again_and_overlaps_are_fine() -> None:
    r = SyncRanges(0)
    a, b = r.claim(100, ts=1), r.claim(200, ts=2)
    assert a is not None and b is not None
    assert r.finish(a, ok=False) is False
    assert r.claimed == 0  # a's bytes must be synced again
    assert r.finish(b, ok=True) is False and r.durable == 0
    c = r.claim(250, ts=3)
    assert c is not None and (c.start, c.end) == (0, 250)  # overlaps b
    assert r.finish(c, ok=True) is True and r.durable == 250


def test_claims_made_before_a_truncation_do_not_count() -> None:
    r = SyncRanges(0, generation=0)
    a = r.claim(500, ts=1)
    assert a is not None
    r.reset(300, generation=1)  # truncated to 300 while a was being synced
    assert r.finish(a, ok=True) is False and r.durable == 300
    b = r.claim(400, ts=2)
    assert b is not None and (b.start, b.end) == (300, 400)


@pytest.mark.parametrize("seed", range(20))
def test_durable_never_passes_bytes_that_were_not_synced(seed: int) -> None:
    """Random claims, finishes and failures on up to three workers, checked against the synced bytes."""
    rnd = random.Random(seed)
    r = SyncRanges(0)
    synced = bytearray(4000)  # 1: that byte was synced by a range that finished ok
    end = 0
    running: list[Claim] = []
    for _ in range(300):
        if len(running) < 3 and rnd.random() < 0.5:
            end = min(end + rnd.randint(0, 40), len(synced))
            c = r.claim(end, ts=end)
            if c is not None:
                running.append(c)
        elif running:
            c = running.pop(rnd.randrange(len(running)))
            ok = rnd.random() > 0.1
            if ok:
                synced[c.start : c.end] = b"\1" * (c.end - c.start)
            r.finish(c, ok=ok)
        assert all(synced[: r.durable]), f"durable {r.durable} covers unsynced bytes"
        assert r.durable <= r.claimed <= end
    for c in running:
        synced[c.start : c.end] = b"\1" * (c.end - c.start)
        r.finish(c, ok=True)
    last = r.claim(end, ts=end)  # whatever a failure left unclaimed
    if last is not None:
        r.finish(last, ok=True)
    assert r.durable == end


# --- SharedLock -------------------------------------------------------------------------------------


def test_shared_holders_overlap_and_an_exclusive_one_waits_for_them() -> None:
    lock = SharedLock()
    inside = threading.Barrier(2, timeout=5)
    exclusive_got = threading.Event()

    def shared_holder() -> None:
        with lock.shared():
            inside.wait()  # both shared holders are in at once
            time.sleep(0.05)

    holders = [threading.Thread(target=shared_holder) for _ in range(2)]
    for t in holders:
        t.start()

    def exclusive_holder() -> None:
        with lock:
            exclusive_got.set()

    time.sleep(0.01)
    ex = threading.Thread(target=exclusive_holder)
    ex.start()
    for t in holders:
        t.join(5)
    ex.join(5)
    assert exclusive_got.is_set() and not lock.held_exclusively


def test_a_waiting_exclusive_holder_keeps_new_shared_holders_out() -> None:
    lock = SharedLock()
    order: list[str] = []
    first_in = threading.Event()
    release_first = threading.Event()

    def first() -> None:
        with lock.shared():
            first_in.set()
            release_first.wait(5)
        order.append("first out")

    def exclusive() -> None:
        with lock:
            order.append("exclusive")

    def late_shared() -> None:
        with lock.shared():
            order.append("late shared")

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_in.wait(5)
    t2 = threading.Thread(target=exclusive)
    t2.start()
    wait_until_sync(lambda: lock._exclusive_waiting == 1, timeout=5, what="exclusive waiting")
    t3 = threading.Thread(target=late_shared)
    t3.start()
    time.sleep(0.05)
    assert order == []  # the late shared holder waits behind the exclusive one
    release_first.set()
    for t in (t1, t2, t3):
        t.join(5)
    assert order == ["first out", "exclusive", "late shared"]
    with pytest.raises(RuntimeError):
        lock.release()


# --- the flusher on a real store --------------------------------------------------------------------


class RecordingSync:
    """Wraps ``mfq.sync_range``: records each range and its thread; the first call waits for ``gate``."""

    def __init__(self, real, gate: threading.Event) -> None:  # type: ignore[no-untyped-def]
        self.real = real
        self.gate = gate
        self.ranges: list[tuple[int, int, str]] = []
        self.first_inside = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, start: int, end: int) -> None:
        with self._lock:
            first = not self.ranges
            self.ranges.append((start, end, threading.current_thread().name))
        if first:
            self.first_inside.set()
            assert self.gate.wait(10)
        self.real(start, end)


def test_a_second_thread_syncs_while_the_first_is_inside_msync(new_store: StoreFactory) -> None:
    """Request 2 is synced by another thread during sync 1, but answered only once sync 1 is done too."""
    store = new_store(
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        sync_flush_threads=2,
        flush_interval_ms=60_000,
        flush_thorough_interval_ms=60_000,
    )
    mfq = store.commitlog.mfq
    gate = threading.Event()
    rec = RecordingSync(mfq.sync_range, gate)
    mfq.sync_range = rec  # type: ignore[method-assign]
    answers: dict[int, bool] = {}
    answered = threading.Event()

    def answer(key: int) -> object:
        def cb(ok: bool) -> None:
            answers[key] = ok
            if len(answers) == 2:
                answered.set()

        return cb

    try:
        r1 = store.put_messages("T", 0, keyed(1))[0]
        end1 = r1.physical_offset + r1.size
        store.request_flush(end1, answer(1))  # type: ignore[arg-type]
        assert rec.first_inside.wait(10)
        r2 = store.put_messages("T", 0, keyed(2))[0]
        end2 = r2.physical_offset + r2.size
        store.request_flush(end2, answer(2))  # type: ignore[arg-type]
        wait_until_sync(lambda: len(rec.ranges) == 2, timeout=10, what="the second sync")
        time.sleep(0.05)
        assert answers == {}  # the second range is synced, but the first is not yet: nobody is answered
        assert store.flushed_offset < end1
    finally:
        gate.set()
    assert answered.wait(10)
    assert answers == {1: True, 2: True}
    (s1, e1, t1), (s2, e2, t2) = rec.ranges
    assert (s1, e1, s2, e2) == (0, end1, end1, end2) and t1 != t2
    assert store.flushed_offset == end2 == store.checkpoint.flushed_phys


def test_after_a_truncation_the_next_sync_starts_at_the_truncated_end(new_store: StoreFactory) -> None:
    """Bytes rewritten after a truncation are synced again, though an earlier sync had gone past them."""
    store = new_store(
        flush_disk_type=FlushDiskType.SYNC_FLUSH, flush_interval_ms=60_000, flush_thorough_interval_ms=60_000
    )
    done = threading.Event()
    r1 = store.put_messages("T", 0, keyed(1))[0]
    r2 = store.put_messages("T", 0, keyed(2))[0]
    end2 = r2.physical_offset + r2.size
    store.request_flush(end2, lambda ok: done.set())
    assert done.wait(10) and store.flushed_offset == end2
    end1 = r1.physical_offset + r1.size
    store.truncate_to(end1)
    assert store.flushed_offset == end1
    mfq = store.commitlog.mfq
    rec = RecordingSync(mfq.sync_range, threading.Event())
    rec.gate.set()
    mfq.sync_range = rec  # type: ignore[method-assign]
    r3 = store.put_messages("T", 0, keyed(3, size=400))[0]
    end3 = r3.physical_offset + r3.size
    assert r3.physical_offset == end1 and end3 > end2
    got: list[bool] = []
    again = threading.Event()
    store.request_flush(end3, lambda ok: (got.append(ok), again.set()))
    assert again.wait(10) and got == [True]
    assert [(s, e) for s, e, _ in rec.ranges] == [(end1, end3)]
    assert store.flushed_offset == end3


def test_a_failed_sync_fails_its_own_senders_and_is_synced_again_for_the_later_ones(
    new_store: StoreFactory,
) -> None:
    """Sync 1 fails while sync 2 (another thread) succeeds: request 1 gets False, request 2 True after a re-sync."""
    store = new_store(
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        sync_flush_threads=2,
        flush_interval_ms=60_000,
        flush_thorough_interval_ms=60_000,
    )
    mfq = store.commitlog.mfq
    gate = threading.Event()
    rec = RecordingSync(mfq.sync_range, gate)

    def failing_first(start: int, end: int) -> None:
        first = not rec.ranges
        rec(start, end)  # records; the first call waits for the gate
        if first:
            raise OSError(5, "injected EIO")

    mfq.sync_range = failing_first  # type: ignore[method-assign]
    answers: dict[int, bool] = {}
    both = threading.Event()

    def answer(key: int) -> object:
        def cb(ok: bool) -> None:
            answers[key] = ok
            if len(answers) == 2:
                both.set()

        return cb

    r1 = store.put_messages("T", 0, keyed(1))[0]
    end1 = r1.physical_offset + r1.size
    store.request_flush(end1, answer(1))  # type: ignore[arg-type]
    assert rec.first_inside.wait(10)
    r2 = store.put_messages("T", 0, keyed(2))[0]
    end2 = r2.physical_offset + r2.size
    store.request_flush(end2, answer(2))  # type: ignore[arg-type]
    wait_until_sync(lambda: len(rec.ranges) == 2, timeout=10, what="the second sync")
    gate.set()
    assert both.wait(10)
    assert answers == {1: False, 2: True}
    assert [(s, e) for s, e, _ in rec.ranges] == [(0, end1), (end1, end2), (0, end2)]
    assert store.flushed_offset == end2
