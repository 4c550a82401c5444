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
Truncation trims or drops a pending file in memory. Anything else that needs the file itself
(recovery repairs, cleanup) makes it at once, on the caller's thread
(:meth:`~pymq.broker.store.map_pool.PooledMappedFile.view`), the queue's earlier pending files
first. A queue's files always reach the disk in order (a failed file is retried before any
later one): recovery rebuilds a queue from its first file on, and a gap would lose entries.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path
from typing import Protocol

from pymq.logs import RateLimitedLog, get_logger

log = get_logger("broker.store.file_maker")

#: states of a pending file (``PendingFile.making``)
QUEUED, MAKING, MADE, CANCELLED = 1, 2, 3, 4
#: files adopted per hold of the store lock (bounds how long the writer can wait for it)
ADOPT_BATCH = 32


class PendingFile(Protocol):
    """What the maker needs of a pending file (:class:`~pymq.broker.store.map_pool.PooledMappedFile`)."""

    path: Path
    making: int
    made: tuple[memoryview, int] | None

    def create_mapping(self) -> tuple[memoryview, int]: ...

    def adopt(self) -> None: ...


class FileMaker(threading.Thread):
    """Creates, maps and adopts pending consume-queue files, in the order they were queued."""

    def __init__(self, store_lock: threading.RLock) -> None:
        super().__init__(name="pymq-file-maker", daemon=True)
        self.store_lock = store_lock
        #: guards the queue and every file's ``making`` state; notified when a file is made
        self.cond = threading.Condition()
        self._queue: deque[PendingFile] = deque()
        self._stopping = False
        self._limited = RateLimitedLog(log)
        #: files made here so far (stats, tests)
        self.made = 0

    def submit(self, mf: PendingFile) -> None:
        with self.cond:
            mf.making = QUEUED
            self._queue.append(mf)
            self.cond.notify_all()

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
                    self.cond.wait()
                if self._stopping:
                    break
                mf = self._queue.popleft()
                if mf.making != QUEUED:
                    continue  # claimed or cancelled meanwhile
                mf.making = MAKING
            try:
                mf.made = mf.create_mapping()
            except Exception as exc:
                # e.g. a full disk: the entries stay buffered (and readable); the same file is
                # retried first. Files are made strictly in the order they were queued, so a
                # queue's later file never reaches the disk before an earlier one (recovery
                # rebuilds a queue from its first file on: a gap would lose or refuse entries).
                self._limited.log("warning", "consume_queue_file_creation_failed", path=str(mf.path), reason=str(exc))
                self._adopt(made)  # what was made before it is not held back by the failure
                with self.cond:
                    if mf.making == MAKING:
                        mf.making = QUEUED
                        self._queue.appendleft(mf)
                    self.cond.notify_all()
                    self.cond.wait(1.0)
                continue
            with self.cond:
                mf.making = MADE
                self.made += 1
                self.cond.notify_all()
                more = bool(self._queue)
            made.append(mf)
            if not more or len(made) >= ADOPT_BATCH:
                self._adopt(made)
        self._adopt(made)

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
