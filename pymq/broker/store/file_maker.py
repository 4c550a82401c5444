"""New consume-queue files made on a thread, so that a queue's first write does not wait for the disk.

Creating a file costs directory updates (``mkdir`` for a new queue, then ``open(O_CREAT)``,
``posix_fallocate`` and ``rename``): 0.3-2 ms of file-system work on this VM, which on the
writer's thread (the broker's event loop) stalled every first touch of a new queue.
Instead, a new pooled file (:class:`~pymq.broker.store.map_pool.PooledMappedFile`) starts
*pending*: its entries go to a small in-memory buffer, readable like the mapping would be,
and the file is queued here. :class:`FileMaker` creates it, maps it and prefaults its first
page without any store lock (the system calls release the GIL), then, under the store lock,
*adopts* it: the buffered entries are copied into the mapping, which replaces the buffer.

Until then nothing of the file is on disk: the logics flush skips pending files and holds
back the checkpoint's ``logics_ts`` (recovery after a crash then re-dispatches their entries
from the commitlog); shutdown makes every pending file first (:meth:`~pymq.broker.store.map_pool.MapPool.settle`).
Truncation trims or drops a pending file in memory, and so does cleanup when every buffered
entry is expired (:meth:`~pymq.broker.store.consume_queue.ConsumeQueue.delete_expired`; a file
being made right now is left for its next pass). Anything else that needs the file itself
(recovery repairs) makes it at once, on the caller's thread
(:meth:`~pymq.broker.store.map_pool.PooledMappedFile.view`), the queue's earlier pending files
first. A queue's files always reach the disk in order (a failed file is retried before any
later one): recovery rebuilds a queue from its first file on, and a gap would lose entries.
The thread also makes the next index file ahead of its roll (:mod:`pymq.broker.store.index_next`:
no buffered entries, and a failure is left to the writer instead of retried here).

The buffers are bounded. If creating files keeps failing (EMFILE, EACCES, ENOSPC on the
queue directory ...) or falls far behind, the files waiting and the bytes buffered grow with
every put. Past ``max_files`` waiting (checked as a file is queued) or ``max_bytes`` buffered
(measured on the maker thread, at most every :data:`MEASURE_INTERVAL` s while files wait)
the maker calls ``on_backlog(reason)``: the store refuses puts with ``reason`` (naming the
file and the error) and one rate-limited error line is logged; once both fall below half
their limits, ``on_backlog(None)`` and puts are accepted again. Nothing buffered is dropped.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pymq.logs import RateLimitedLog, get_logger

log = get_logger("broker.store.file_maker")

#: states of a pending file (``PendingFile.making``)
QUEUED, MAKING, MADE, CANCELLED = 1, 2, 3, 4
#: files adopted per hold of the store lock (bounds how long the writer can wait for it)
ADOPT_BATCH = 32
#: seconds between measurements of the buffered bytes while files wait
MEASURE_INTERVAL = 0.05
#: seconds between retries of a file whose creation failed
RETRY_INTERVAL = 1.0
#: the start of the reason puts are refused with while the backlog is over its limits
BACKLOG_REASON = "consume-queue files not made"


class PendingFile(Protocol):
    """What the maker needs of a pending file (:class:`~pymq.broker.store.map_pool.PooledMappedFile`)."""

    path: Path
    making: int
    #: what create_mapping made, until adopted (a consume-queue file's (mapping, address))
    made: Any
    #: the entries buffered until the file is adopted (None: adopted or cancelled)
    pending: bytearray | None

    def create_mapping(self) -> Any: ...

    def adopt(self) -> None: ...


class FileMaker(threading.Thread):
    """Creates, maps and adopts pending consume-queue files, in the order they were queued."""

    def __init__(
        self,
        store_lock: threading.RLock,
        *,
        max_files: int = 0,
        max_bytes: int = 0,
        on_backlog: Callable[[str | None], None] | None = None,
    ) -> None:
        """``max_files``/``max_bytes``: the backlog past which ``on_backlog(reason)`` is called (0: no limit)."""
        super().__init__(name="pymq-file-maker", daemon=True)
        self.store_lock = store_lock
        #: guards the queue and every file's ``making`` state; notified when a file is made
        self.cond = threading.Condition()
        self._queue: deque[PendingFile] = deque()
        self._stopping = False
        self._limited = RateLimitedLog(log)
        #: files made here so far (stats, tests)
        self.made = 0
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.on_backlog = on_backlog
        #: why puts are refused while the backlog is over its limits (None: it is not)
        self.backlog: str | None = None
        #: files waiting and bytes buffered at the last measurement
        self.waiting_files = 0
        self.waiting_bytes = 0
        #: the last creation failure (path, errno, reason) while the same file is retried
        self.failure: tuple[str, int | None, str] | None = None
        self._measured_at = 0.0
        #: the file being made right now (out of the queue meanwhile)
        self._in_hand: PendingFile | None = None

    def submit(self, mf: PendingFile) -> None:
        with self.cond:
            mf.making = QUEUED
            self._queue.append(mf)
            self.cond.notify_all()
            # The writer's thread: the O(1) upper bound first. Only files with buffered entries
            # count (the index's next file waits in the same queue and buffers nothing), so past
            # the bound count them exactly; that happens near the limit only.
            upper = len(self._queue) + (self._in_hand is not None)
            if self.max_files and self.backlog is None and upper > self.max_files:
                waiting = self._buffering_files()
                if waiting > self.max_files:
                    self._over(waiting, -1)

    def claim(self, mf: PendingFile) -> None:
        """Take ``mf`` back for the caller to make (if not started) or wait until it is made here."""
        with self.cond:
            while mf.making == MAKING:
                self.cond.wait()
            if mf.making == QUEUED:
                mf.making = 0  # the caller makes it; the thread skips it

    def idle(self) -> bool:
        with self.cond:
            return not self._queue

    def run(self) -> None:
        made: list[PendingFile] = []
        while True:
            with self.cond:
                while not self._queue and not self._stopping:
                    if self.backlog is not None or self.waiting_files:
                        self._measure()  # all made: the backlog is over
                    self.cond.wait()
                if self._stopping:
                    break
                mf = self._queue.popleft()
                if mf.making != QUEUED:
                    continue  # claimed or cancelled meanwhile
                mf.making = MAKING
                self._in_hand = mf
            if time.monotonic() - self._measured_at >= MEASURE_INTERVAL:
                self._measure()
            try:
                mf.made = mf.create_mapping()
            except Exception as exc:
                # e.g. a full disk: the entries stay buffered (and readable); the same file is
                # retried first. Files are made strictly in the order they were queued, so a
                # queue's later file never reaches the disk before an earlier one (recovery
                # rebuilds a queue from its first file on: a gap would lose or refuse entries).
                errno = getattr(exc.__cause__, "errno", None) or getattr(exc, "errno", None)
                self.failure = (str(mf.path), errno, str(exc))
                self._limited.log(
                    "warning", "consume_queue_file_creation_failed", path=str(mf.path), errno=errno, reason=str(exc)
                )
                self._adopt(made)  # what was made before it is not held back by the failure
                with self.cond:
                    self._in_hand = None
                    if self.backlog is not None and str(exc) not in self.backlog:
                        self._over(self.waiting_files, self.waiting_bytes)  # refused already: name the failure
                    if mf.making == MAKING:
                        mf.making = QUEUED
                        self._queue.appendleft(mf)
                    self.cond.notify_all()
                # Wait to retry; meanwhile keep measuring the growing buffers.
                retry_at = time.monotonic() + RETRY_INTERVAL
                while True:
                    self._measure()
                    with self.cond:
                        left = retry_at - time.monotonic()
                        if self._stopping or left <= 0:
                            break
                        self.cond.wait(min(left, MEASURE_INTERVAL))
                continue
            self.failure = None
            with self.cond:
                self._in_hand = None
                mf.making = MADE
                self.made += 1
                self.cond.notify_all()
                more = bool(self._queue)
            made.append(mf)
            if not more or len(made) >= ADOPT_BATCH:
                self._adopt(made)
        self._adopt(made)

    # --- the backlog's bounds ---------------------------------------------------------------------------

    def _buffering_files(self) -> int:
        """Files queued or in hand whose entries wait in memory (holding ``cond``)."""
        waiting = list(self._queue)
        if self._in_hand is not None:
            waiting.append(self._in_hand)
        return sum(1 for mf in waiting if mf.pending is not None and mf.making in (QUEUED, MAKING))

    def _measure(self) -> None:
        """Count the files waiting and their buffered bytes; refuse or accept puts (maker thread)."""
        with self.cond:  # (only to copy the queue: the writer's submit never waits for the count)
            self._measured_at = time.monotonic()
            waiting = list(self._queue)
            if self._in_hand is not None:
                waiting.append(self._in_hand)
        files = buffered = 0
        for mf in waiting:
            pending = mf.pending  # (read without the store lock: a length is all we need)
            if pending is not None and mf.making in (QUEUED, MAKING):
                files += 1
                buffered += len(pending)
        with self.cond:
            self._decide(files, buffered)

    def _decide(self, files: int, buffered: int) -> None:
        """Refuse puts past a limit, accept them again under half of both (holding ``cond``)."""
        self.waiting_files, self.waiting_bytes = files, buffered
        if self.backlog is None:
            if (self.max_files and files > self.max_files) or (self.max_bytes and buffered > self.max_bytes):
                self._over(files, buffered)
        elif (not self.max_files or files <= self.max_files // 2) and (
            not self.max_bytes or buffered <= self.max_bytes // 2
        ):
            self.backlog = None
            log.warning("consume_queue_backlog_cleared_writes_accepted", waiting_files=files, waiting_bytes=buffered)
            if self.on_backlog is not None:
                self.on_backlog(None)

    def _over(self, files: int, buffered: int) -> None:
        """The backlog passed a limit: refuse puts, naming the failing file and its error (holding ``cond``)."""
        failure = self.failure
        cause = failure[2] if failure is not None else f"{files} files waiting for the file maker"
        self.backlog = f"{BACKLOG_REASON} ({cause}): writes refused until the file maker catches up"
        self._limited.log(
            "error",
            "consume_queue_backlog_writes_refused",
            path=failure[0] if failure else None,
            errno=failure[1] if failure else None,
            reason=cause,
            waiting_files=files,
            waiting_bytes=buffered if buffered >= 0 else None,
            max_files=self.max_files,
            max_bytes=self.max_bytes,
        )
        if self.on_backlog is not None:
            self.on_backlog(self.backlog)

    def _adopt(self, made: list[PendingFile]) -> None:
        if made:
            with self.store_lock:
                for mf in made:
                    mf.adopt()
            made.clear()

    def stop(self) -> None:
        """Stop after the file in hand (adopted); files still queued stay pending for :meth:`MapPool.settle`."""
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        self.join(timeout=30)
