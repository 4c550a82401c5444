"""SYNC_FLUSH syncs through the store's C syncer, answered on the event loop (no GIL hand-off).

With the C accelerator the store has a :class:`~pymq._speedups.Syncer`: a thread that msyncs
the ranges it is given without ever taking the GIL, and signals each finished job on an
eventfd. :class:`LoopSync` is the group commit's ``request_flush`` for it: on the loop it
plans the sync (:meth:`MessageStore.sync_plan`), submits it, and when the eventfd turns
readable (``loop.add_reader``) takes the finished jobs, records them
(:meth:`MessageStore.sync_done`) and calls each request's callback right there, on the loop.
Compared with the flusher thread's path (a Condition to wake it, the GIL to run its Python,
``call_soon_threadsafe`` back) neither hand-off waits for the busy loop to give up the GIL.

Without the accelerator (or ``PYMQ_NO_SPEEDUPS=1``) the store has no syncer and the group
commit asks the flusher thread (:meth:`MessageStore.request_flush`) as before.

The broker closes this before the store shuts down (:meth:`close`): the eventfd leaves the
loop first, and jobs still queued finish and are answered. (The syncer keeps its eventfd
open until it is freed, so even a store stopped first never has its number reused under a
loop still watching it.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.logs import RateLimitedLog, get_logger

if TYPE_CHECKING:
    from pymq.broker.store import MessageStore
    from pymq.broker.store.sync_plan import Syncer, SyncPlan

log = get_logger("broker.loop_sync")

#: seconds before recording a finished sync again when the flusher thread held the file lock
RECORD_RETRY = 0.001


class LoopSync:
    """The group commit's ``request_flush`` through the store's C syncer; callbacks run on the loop."""

    def __init__(self, store: MessageStore, syncer: Syncer) -> None:
        self.store = store
        self.syncer = syncer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._closed = False
        #: synced plans not recorded yet (the file lock was busy)
        self._unrecorded: list[SyncPlan] = []
        self._retry_scheduled = False
        self._limited = RateLimitedLog(log)
        #: syncs submitted / failed so far (tests and stats)
        self.submitted = 0
        self.failed = 0

    @classmethod
    def for_store(cls, store: MessageStore) -> LoopSync | None:
        """A LoopSync on the store's syncer, or None when it has none (the flusher thread answers)."""
        return cls(store, store.syncer) if store.syncer is not None else None

    def request(self, offset: int, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` on the loop once the commitlog below ``offset`` is on disk (ok False: it cannot be).

        Never calls back from inside this call (always from a later loop callback).
        """
        loop = self._loop
        if loop is None:
            loop = self._start()
        if self._closed:
            loop.call_soon(callback, False)
            return
        try:
            plan = self.store.sync_plan(offset)
        except Exception as exc:  # StoreError: stopping; anything else must not strand the request either
            self._limited.log("warning", "sync_not_planned", reason=str(exc))
            loop.call_soon(callback, False)
            return
        if plan is None:
            loop.call_soon(callback, self.store.flushed_offset >= offset)
            return
        try:
            self.syncer.submit((plan, callback), plan.ranges)
        except Exception as exc:  # RuntimeError: closed, or the queue is full (the group commit keeps it short)
            plan.release()
            self._limited.log("warning", "sync_not_submitted", reason=str(exc))
            loop.call_soon(callback, False)
            return
        self.submitted += 1

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = self._loop = asyncio.get_running_loop()
        if not self._closed:
            try:
                self._fd = self.syncer.fileno()
            except ValueError:  # the store stopped (and closed its syncer) first
                self._closed = True
                return loop
            loop.add_reader(self._fd, self._on_done)
        return loop

    def _on_done(self) -> None:
        """The eventfd is readable: finish every job the syncer reports."""
        self._finish(self.syncer.take(), blocking=False)

    def _finish(self, done: list[tuple[tuple[SyncPlan, Callable[[bool], None]], int]], *, blocking: bool) -> None:
        store = self.store
        for (plan, callback), err in done:
            ok = err == 0
            if not ok:
                self.failed += 1
                self._limited.log("error", "sync_failed", errno=err, end=plan.end)
            try:
                if not store.sync_done(plan, ok, blocking=blocking):
                    self._unrecorded.append(plan)
            except Exception:  # (recording failed: the data is synced all the same, answer it)
                log.exception("sync_record_failed")
            try:
                callback(ok)
            except Exception:  # (one failing answer must not leave the other jobs unanswered)
                log.exception("sync_callback_failed")
        if self._unrecorded and not self._retry_scheduled and self._loop is not None:
            self._retry_scheduled = True
            self._loop.call_later(RECORD_RETRY, self._record_later)

    def _record_later(self) -> None:
        self._retry_scheduled = False
        plans, self._unrecorded = self._unrecorded, []
        for plan in plans:
            if not self.store.sync_done(plan, True, blocking=self._closed):
                self._unrecorded.append(plan)
        if self._unrecorded and self._loop is not None:
            self._retry_scheduled = True
            self._loop.call_later(RECORD_RETRY, self._record_later)

    def close(self) -> None:
        """Leave the loop, let the syncer finish its queued jobs, answer them (call on the loop). Idempotent.

        The store's shutdown closes the syncer too; this must come first (the loop must not
        watch a descriptor the store closes).
        """
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and self._fd >= 0:
            self._loop.remove_reader(self._fd)
        self.syncer.close()  # joins the thread: every queued job has run
        self._finish(self.syncer.take(), blocking=True)
        self._record_later()
