"""Background threads: flushing and warming (the syscalls release the GIL, so the event loop keeps running).

* :class:`CommitLogFlusher` — ASYNC_FLUSH: every ``flush_interval_ms``, sync the commitlog
  range written since the last flush if at least ``flush_least_pages`` pages are dirty, or
  whatever is dirty once ``flush_thorough_interval_ms`` has passed. SYNC_FLUSH (group
  commit): callers queue ``(offset, callback)``; the thread wakes on the first request,
  takes every queued request, runs one sync covering all of them, then answers each
  (``True`` if the flushed offset covers it). It also flushes periodically, like ASYNC.
  After each sync it records ``physic_ts`` (the store time of the newest record covered)
  and ``flushed_phys`` in the checkpoint (persisted by the next logics flush).
* :class:`LogicsFlusher` — every ``consume_queue_flush_interval_ms``: consume queues, then
  the checkpoint; index files every ``INDEX_FLUSH_INTERVAL`` (10 s). It holds its own lock,
  never the commitlog flusher's, so syncing many queues does not delay the syncs
  SYNC_FLUSH senders wait for.
* :class:`Warmer` — prefaults commitlog pages ahead of the writer and creates the next file.

Callbacks run on the flusher thread; the broker hops back to its loop with
``call_soon_threadsafe``. The 5 s FLUSH_DISK_TIMEOUT is the caller's (the broker's
:mod:`pymq.broker.group_commit`, which keeps one request in flight for all waiting sends).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.broker.store.sync_ranges import Claim, SyncRanges
from pymq.errors import StoreError
from pymq.logs import RateLimitedLog, get_logger

if TYPE_CHECKING:
    from pymq.broker.store.checkpoint import Checkpoint
    from pymq.broker.store.consume_queue import ConsumeQueue
    from pymq.broker.store.index import IndexService
    from pymq.broker.store.store_view import FlushView

log = get_logger("broker.store.flush")

FlushCallback = Callable[[bool], None]
PAGE = 4096
#: seconds between syncs of the index files (consume queues: every consume_queue_flush_interval_ms)
INDEX_FLUSH_INTERVAL = 10.0


class CommitLogFlusher(threading.Thread):
    """Syncs the commitlog: periodically (both modes) and on request (SYNC_FLUSH's group commit).

    With ``workers`` > 1 (SYNC_FLUSH), that many threads take requests: a request arriving
    while one thread is inside ``msync`` is synced at once by another, over the range
    written since the running sync's range was claimed (:mod:`pymq.broker.store.sync_ranges`),
    instead of waiting for the running sync to finish and then for its own. Requests are
    answered once the contiguous synced prefix covers them, whichever thread finishes it.
    The threads hold the store's file lock shared while syncing; cleanup and truncation
    take it exclusively.
    """

    def __init__(self, store: FlushView, *, sync: bool, workers: int = 1) -> None:
        super().__init__(name="pymq-commitlog-flush", daemon=True)
        self.store = store
        self.sync = sync
        cfg = store.config
        self.interval = cfg.flush_interval_ms / 1000
        self.least_bytes = cfg.flush_least_pages * PAGE
        self.thorough_interval = cfg.flush_thorough_interval_ms / 1000
        self._cond = threading.Condition()
        #: requests not yet looked at by a worker
        self._requests: list[tuple[int, FlushCallback]] = []
        #: requests a worker has claimed a sync for, answered once the synced prefix covers them
        self._waiting: list[tuple[int, FlushCallback]] = []
        mfq = store.commitlog.mfq
        self._ranges = SyncRanges(mfq.flushed_offset, mfq.generation)
        self._stopping = False
        self._last_thorough = time.monotonic()
        self.flush_count = 0
        self._extra = [
            threading.Thread(target=self._work, args=(False,), name=f"pymq-commitlog-sync-{i}", daemon=True)
            for i in range(1, workers if sync else 1)
        ]

    @property
    def workers(self) -> int:
        return 1 + len(self._extra)

    def start(self) -> None:
        super().start()
        for t in self._extra:
            t.start()

    def request(self, offset: int, callback: FlushCallback) -> None:
        """Call ``callback(True)`` once everything below ``offset`` is on disk (False if it cannot be)."""
        with self._cond:
            if self._stopping:
                callback(False)
                return
            self._requests.append((offset, callback))
            self._cond.notify()

    def run(self) -> None:
        self._work(periodic=True)

    def _work(self, periodic: bool) -> None:
        """One worker's loop; the ``periodic`` one also flushes on the interval and does the last flush."""
        cond = self._cond
        while True:
            with cond:
                if not self._requests and not self._stopping:
                    # SYNC_FLUSH wakes up for the first request; the periodic worker also on the interval.
                    cond.wait(self.interval if periodic else None)
                stopping = self._stopping
                if stopping and not periodic:
                    return
                requests, self._requests = self._requests, []
                self._waiting.extend(requests)
            if stopping:
                self._finish_at_stop()
                return
            retry = self._sync_once(force=bool(requests))
            while retry:
                # A failed sync left requests of later ranges waiting on its bytes: sync them
                # again now (a disk that keeps failing fails them too, then this stops).
                retry = self._sync_once(force=True)

    def _sync_once(self, force: bool) -> bool:
        """Claim what was written since the last claim, sync it, answer what is now covered.

        Returns True if the sync failed and requests still wait (the caller syncs again).
        """
        store = self.store
        answered: list[FlushCallback]
        with self._cond:
            claim = self._claim(force)
            if claim is None:
                # Nothing new below the requests: syncs running elsewhere cover them.
                answered = self._covered()
        if claim is not None:
            try:
                with store.file_lock.shared():
                    store.commitlog.mfq.sync_range(claim.start, claim.end)
                    with self._cond:
                        self._finished(claim)
                        answered = self._covered()
            except Exception:
                log.exception("commitlog_flush_failed", start=claim.start, end=claim.end)
                with self._cond:
                    self._current_ranges().finish(claim, ok=False)
                    failed = self._take_waiting(claim.start, claim.end)
                    retry = bool(self._waiting)
                for cb in failed:
                    cb(False)
                return retry
        for cb in answered:
            cb(True)
        return False

    def _claim(self, force: bool) -> Claim | None:
        """The next range to sync (under the condition's lock), or None if none is due."""
        store = self.store
        mfq = store.commitlog.mfq
        ranges = self._current_ranges()
        ts = store.last_store_ts  # read before the end: every record up to it lies below the end
        end = mfq.max_offset
        if self._waiting and max(off for off, _ in self._waiting) > max(end, ranges.claimed):
            self._refuse_past(max(end, ranges.claimed))
        dirty = end - ranges.claimed
        if dirty <= 0:
            return None
        now = time.monotonic()
        thorough = now - self._last_thorough >= self.thorough_interval
        if not (force or thorough or dirty >= self.least_bytes):
            return None
        if thorough:
            self._last_thorough = now
        return ranges.claim(end, ts)

    def _current_ranges(self) -> SyncRanges:
        """The ranges, restarted from what the files say is synced if the commitlog was truncated since."""
        mfq = self.store.commitlog.mfq
        ranges = self._ranges
        if mfq.generation != ranges.generation:
            ranges.reset(mfq.flushed_offset, mfq.generation)
        return ranges

    def _finished(self, claim: Claim) -> None:
        """Record ``claim`` synced; if the synced prefix grew, mark the files and the checkpoint.

        Called holding the file lock shared, so no truncation runs between the generation
        check and the marking: a claim made before a truncation does not count.
        """
        ranges = self._current_ranges()
        self.flush_count += 1
        if ranges.finish(claim, ok=True):
            store = self.store
            store.commitlog.mfq.mark_flushed(ranges.durable)
            if ranges.durable_ts >= 0:
                store.checkpoint.physic_ts = ranges.durable_ts
            store.checkpoint.flushed_phys = ranges.durable

    def _covered(self) -> list[FlushCallback]:
        """Take the waiting requests the synced prefix now covers."""
        durable = self._ranges.durable
        waiting = self._waiting
        if not waiting:
            return []
        done = [cb for off, cb in waiting if off <= durable]
        if done:
            self._waiting = [w for w in waiting if w[0] > durable]
        return done

    def _refuse_past(self, end: int) -> None:
        """Answer False to requests past the end of the commitlog (nothing will ever cover them)."""
        for off, cb in self._waiting:
            if off > end:
                log.warning("flush_request_past_end", offset=off, flushed=end)
                cb(False)
        self._waiting = [w for w in self._waiting if w[0] <= end]

    def _take_waiting(self, start: int, end: int) -> list[FlushCallback]:
        """Take the waiting requests whose data lies in ``[start, end)`` (their sync failed)."""
        taken = [cb for off, cb in self._waiting if start < off <= end]
        self._waiting = [w for w in self._waiting if not start < w[0] <= end]
        return taken

    def _finish_at_stop(self) -> None:
        """The periodic worker, stopping: wait for the others, sync everything, answer everyone."""
        for t in self._extra:
            t.join(timeout=30)
        try:
            self._sync_once(force=True)
        finally:
            with self._cond:
                durable = self._ranges.durable
                rest = self._waiting + self._requests
                self._waiting, self._requests = [], []
            for off, cb in rest:
                # Every request covers data appended before it was queued, and the forced
                # sync above covered all of that: only an offset past the end is left over.
                if off > durable:
                    log.warning("flush_request_past_end", offset=off, flushed=durable)
                cb(off <= durable)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.join(timeout=30)


class LogicsFlusher(threading.Thread):
    """Flushes consume queues and the index, then records the checkpoint."""

    def __init__(self, store: FlushView) -> None:
        super().__init__(name="pymq-logics-flush", daemon=True)
        self.store = store
        self.interval = store.config.consume_queue_flush_interval_ms / 1000
        self._stop_event = threading.Event()

    def run(self) -> None:
        last_index = time.monotonic()
        while not self._stop_event.wait(self.interval):
            now = time.monotonic()
            # Index files less often: a sync writes back slot pages dirtied all over the file,
            # and every slot write after it faults again; recovery rebuilds a crashed tail anyway.
            index = now - last_index >= INDEX_FLUSH_INTERVAL
            try:
                # (files still being made are the maker thread's: never made here under the store lock)
                self.store.flush_logics(index=index, settle=False)
            except Exception:
                log.exception("logics_flush_failed")
            if index:
                last_index = now

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)


class Warmer(threading.Thread):
    """Pre-faults commitlog pages ahead of the writer and creates the next file before it is needed.

    See :meth:`pymq.broker.store.mapped_file.MappedFile.warm_step` for why and how.
    """

    def __init__(self, store: FlushView, ahead: int = 64 * 1024 * 1024) -> None:
        super().__init__(name="pymq-warmer", daemon=True)
        self.store = store
        self.ahead = ahead
        self._stop_event = threading.Event()
        self._limited = RateLimitedLog(log)

    def run(self) -> None:
        mfq = self.store.commitlog.mfq
        while not self._stop_event.is_set():
            worked = False
            try:
                last = mfq.last
                if last is not None:
                    worked = last.warm_step(self.ahead)
                    if last.size - last.reserved < self.ahead:
                        nxt = mfq.next_file or mfq.preallocate_next()
                        if nxt is not None:
                            worked = nxt.warm_step(self.ahead) or worked
            except StoreError as exc:
                # No room for the next file (disk full): the writer answers for it when it needs
                # the file; here, one line per interval instead of a traceback every second.
                self._limited.log("warning", "next_file_preallocation_failed", reason=str(exc))
                self._stop_event.wait(1.0)
            except Exception:
                self._limited.log("error", "warmer_failed", exc_info=True)
                self._stop_event.wait(1.0)
            if not worked:
                self._stop_event.wait(0.005)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)


def flush_logics_pass(
    dirty: set[ConsumeQueue], index: IndexService | None, checkpoint: Checkpoint, logics_ts: int
) -> None:
    """Sync the queues written since the last pass (and the index if given), then the checkpoint.

    ``logics_ts`` is the store time read before the syncs: the checkpoint only ever claims
    what was synced. The writer adds to ``dirty`` meanwhile (``set.pop`` is atomic).
    """
    flushed: list[ConsumeQueue] = []
    #: queues with entries in a file still being made (file_maker): synced by a later pass
    unmade: list[ConsumeQueue] = []
    try:
        while dirty:
            cq = dirty.pop()
            flushed.append(cq)
            if not cq.flush():
                unmade.append(cq)
    except BaseException:
        dirty.update(flushed)  # retried next pass
        raise
    dirty.update(unmade)
    if index is not None:
        checkpoint.index_ts = index.flush()
    if not unmade:
        # (otherwise the checkpoint keeps claiming less: recovery re-dispatches the unmade entries)
        checkpoint.logics_ts = logics_ts
    checkpoint.flush()
