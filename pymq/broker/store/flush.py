"""Background threads: flushing and warming (the syscalls release the GIL, so the event loop keeps running).

* :class:`CommitLogFlusher` — ASYNC_FLUSH: every ``flush_interval_ms``, sync the commitlog
  range written since the last flush if at least ``flush_least_pages`` pages are dirty, or
  whatever is dirty once ``flush_thorough_interval_ms`` has passed. SYNC_FLUSH (group
  commit) without the C accelerator: callers queue ``(offset, callback)``; the thread wakes
  on the first request, takes every queued request, runs one sync covering all of them,
  then answers each (``True`` if the flushed offset covers it). With the accelerator the
  broker's group commit syncs through the store's C ``Syncer`` instead (no GIL hand-offs:
  :mod:`pymq.broker.store.sync_plan`, :mod:`pymq.broker.sync_flush.loop_sync`), and this thread only
  flushes periodically, like ASYNC; both record into the same flushed positions, which only
  move forward.
  After each sync it records ``physic_ts`` (the store time of the newest record covered)
  and ``flushed_phys`` in the checkpoint (persisted by the next logics flush).
* :class:`LogicsFlusher` — every ``consume_queue_flush_interval_ms``: consume queues, then
  the checkpoint; index files every ``INDEX_FLUSH_INTERVAL`` (10 s). It holds its own lock,
  never the commitlog flusher's, so syncing many queues does not delay the syncs
  SYNC_FLUSH senders wait for.
* :class:`Warmer` — prefaults commitlog pages ahead of the writer and creates the next file.

Callbacks of :meth:`CommitLogFlusher.request` run on the flusher thread; the broker hops back
to its loop with ``call_soon_threadsafe``. The 5 s FLUSH_DISK_TIMEOUT is the caller's (the
broker's :mod:`pymq.broker.sync_flush.group_commit`, which keeps one or two requests out for all waiting sends).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.config import FlushDiskType
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
    def __init__(self, store: FlushView, *, sync: bool) -> None:
        super().__init__(name="pymq-commitlog-flush", daemon=True)
        self.store = store
        self.sync = sync
        cfg = store.config
        self.interval = cfg.flush_interval_ms / 1000
        self.least_bytes = cfg.flush_least_pages * PAGE
        self.thorough_interval = cfg.flush_thorough_interval_ms / 1000
        self._cond = threading.Condition()
        self._requests: list[tuple[int, FlushCallback]] = []
        self._stopping = False
        self._last_thorough = time.monotonic()
        self.flush_count = 0

    def request(self, offset: int, callback: FlushCallback) -> None:
        """Call ``callback(True)`` once everything below ``offset`` is on disk (False if it cannot be)."""
        with self._cond:
            if self._stopping:
                callback(False)
                return
            self._requests.append((offset, callback))
            self._cond.notify()

    def run(self) -> None:
        while True:
            with self._cond:
                if not self._requests and not self._stopping:
                    # SYNC_FLUSH wakes up for the first request; both modes flush periodically.
                    self._cond.wait(self.interval)
                stopping = self._stopping
                requests, self._requests = self._requests, []
            try:
                self._flush_once(force=stopping or bool(requests))
            except Exception:
                log.exception("commitlog_flush_failed")
                for _, cb in requests:
                    cb(False)
                requests = []
            flushed = self.store.commitlog.mfq.flushed_offset
            for off, cb in requests:
                # Every request covers data appended before it was queued, and the forced
                # flush above synced all of that: only an offset past the end is left over.
                if off > flushed:
                    log.warning("flush_request_past_end", offset=off, flushed=flushed)
                cb(off <= flushed)
            if stopping:
                with self._cond:
                    rest, self._requests = self._requests, []
                for _, cb in rest:
                    cb(False)
                return

    def _flush_once(self, force: bool) -> None:
        store = self.store
        mfq = store.commitlog.mfq
        now = time.monotonic()
        dirty = mfq.dirty_bytes()
        if not dirty:
            return
        thorough = now - self._last_thorough >= self.thorough_interval
        if not (force or thorough or dirty >= self.least_bytes):
            return
        ts = store.last_store_ts  # snapshot before the sync: everything up to it gets covered
        with store.file_lock:
            mfq.flush()
            if ts > store.checkpoint.physic_ts:  # (the C syncer may have recorded a later one)
                store.checkpoint.physic_ts = ts
            store.checkpoint.flushed_phys = mfq.flushed_offset
        self.flush_count += 1
        if thorough:
            self._last_thorough = now

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
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
        #: SYNC_FLUSH: write the warmed zeros back too (see MappedFile._write_back)
        cfg = store.config
        self.write_back = cfg.sync_flush_write_ahead and cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH
        #: the commitlog writes with pwrite (SYNC_FLUSH): warm the same way (see MappedFile.warm_step)
        self.by_pwrite = cfg.commitlog_pwrite
        self._stop_event = threading.Event()
        self._limited = RateLimitedLog(log)

    def run(self) -> None:
        mfq = self.store.commitlog.mfq
        while not self._stop_event.is_set():
            worked = False
            try:
                last = mfq.last
                if last is not None:
                    worked = last.warm_step(self.ahead, self.write_back, self.by_pwrite)
                    if last.size - last.reserved < self.ahead:
                        nxt = mfq.next_file or mfq.preallocate_next()
                        if nxt is not None:
                            worked = nxt.warm_step(self.ahead, self.write_back, self.by_pwrite) or worked
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
