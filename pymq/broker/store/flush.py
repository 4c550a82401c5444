"""Background flushing, on threads (fdatasync releases the GIL, so the event loop keeps running).

* :class:`CommitLogFlusher` — ASYNC_FLUSH: every interval, flush when enough pages are dirty
  or the thorough interval has passed. SYNC_FLUSH: group commit — callers queue
  ``(offset, callback)`` requests; one fdatasync covers every request queued before it.
* :class:`LogicsFlusher` — consume queues and index every second, then the checkpoint.

Callbacks run on the flusher thread; the broker hops back to its loop with
``call_soon_threadsafe``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.logs import get_logger

if TYPE_CHECKING:
    from pymq.broker.store.message_store import MessageStore

log = get_logger("broker.store.flush")

FlushCallback = Callable[[bool], None]
PAGE = 4096


class CommitLogFlusher(threading.Thread):
    def __init__(self, store: MessageStore, *, sync: bool) -> None:
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
        """Call ``callback(True)`` once everything below ``offset`` is on disk (SYNC_FLUSH)."""
        with self._cond:
            if self._stopping:
                callback(False)
                return
            self._requests.append((offset, callback))
            self._cond.notify()

    def run(self) -> None:
        while True:
            with self._cond:
                if self.sync:
                    while not self._requests and not self._stopping:
                        self._cond.wait(self.interval)
                        if not self._requests and not self._stopping:
                            break  # periodic flush even with no waiters
                else:
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
            late = []
            for off, cb in requests:
                if off <= flushed:
                    cb(True)
                else:
                    late.append((off, cb))
            if late:
                with self._cond:
                    self._requests[:0] = late
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

    def __init__(self, store: MessageStore) -> None:
        super().__init__(name="pymq-logics-flush", daemon=True)
        self.store = store
        self.interval = store.config.consume_queue_flush_interval_ms / 1000
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            try:
                self.store.flush_logics()
            except Exception:
                log.exception("logics_flush_failed")

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)


class Warmer(threading.Thread):
    """Pre-faults commitlog pages ahead of the writer and creates the next file before it is needed.

    See :meth:`pymq.broker.store.mapped_file.MappedFile.warm_step` for why and how.
    """

    def __init__(self, store: MessageStore, ahead: int = 64 * 1024 * 1024) -> None:
        super().__init__(name="pymq-warmer", daemon=True)
        self.store = store
        self.ahead = ahead
        self._stop_event = threading.Event()

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
            except Exception:
                log.exception("warmer_failed")
                self._stop_event.wait(1.0)
            if not worked:
                self._stop_event.wait(0.005)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)
