"""Reading ahead of cold pulls on a thread, so that the event loop does not wait for the disk.

A pull answers with slices of the mapped commitlog; the pages are touched when the
transport copies them into the socket, on the event loop. For a backlog that is not in the
page cache (a consumer catching up after a restart, or reading old data) each touch of a
page not yet mapped is a page fault, and a fault on a page still on disk waits for the read:
the loop stalls. ``madvise(MADV_WILLNEED)`` only starts the kernel's read-ahead and still
leaves a fault per page; it did not move the figures.

:class:`ReadAhead` instead maps the next range of each cold reader *before* it is read, with
``madvise(MADV_POPULATE_READ)`` (Linux >= 5.14, through ctypes so the GIL is released): the
pages are read from disk if needed and entered into the page tables, so the loop's copy then
takes no fault at all. A read counts as cold when it ends more than ``HOT_WINDOW`` behind
the commitlog's end (the tail was just written and is resident). The loop's side
(:meth:`hint`) is one dict lookup per pull; a reader already covered ``AHEAD // 2`` past
its position costs nothing more. Populating reads the file and never changes it, so it
needs no lock: a file deleted meanwhile only makes ``madvise`` fail (ignored).
"""

from __future__ import annotations

import ctypes
import errno
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING

from pymq.broker.store import mapped_file
from pymq.logs import RateLimitedLog, get_logger

if TYPE_CHECKING:
    from pymq.broker.store.mapped_file import MappedFileQueue

log = get_logger("broker.store.read_ahead")

_MADV_POPULATE_READ = 22  # Linux >= 5.14
#: reads ending closer than this to the commitlog end are taken as hot (no read-ahead)
HOT_WINDOW = 64 << 20
#: how far ahead of a cold reader the pages are mapped
AHEAD = 16 << 20
#: one madvise call covers at most this much (the thread checks for stop/newer hints between)
CHUNK = 2 << 20
#: readers remembered (least recently hinted ones are forgotten past it)
MAX_CURSORS = 1024

#: False once the kernel refused MADV_POPULATE_READ (then the thread is never started)
AVAILABLE = mapped_file._madvise is not None


class ReadAhead(threading.Thread):
    """Maps the commitlog ``AHEAD`` bytes ahead of each cold reader (a reader: any hashable key)."""

    def __init__(self, mfq: MappedFileQueue, *, ahead: int = AHEAD, hot_window: int = HOT_WINDOW) -> None:
        super().__init__(name="pymq-read-ahead", daemon=True)
        self.mfq = mfq
        self.ahead = ahead
        self.hot_window = hot_window
        #: per reader, how far its range is mapped (the loop reads it, the thread raises it)
        self._covered: OrderedDict[Hashable, int] = OrderedDict()
        #: readers waiting for the thread, with the position they asked from
        self._wanted: dict[Hashable, int] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._limited = RateLimitedLog(log)
        #: bytes the thread asked the kernel to map so far (stats, tests)
        self.populated = 0

    def hint(self, reader: Hashable, end: int, commitlog_end: int) -> None:
        """A pull of ``reader`` read the commitlog up to ``end`` (the writer's thread, under the store lock)."""
        if end + self.hot_window >= commitlog_end:
            return
        covered = self._covered.get(reader, -1)
        if end <= covered - self.ahead // 2 and covered - end <= 2 * self.ahead:
            return  # mapped far enough ahead already (and not a reader that jumped back)
        with self._cond:
            self._wanted[reader] = end
            self._cond.notify()

    def covered(self, reader: Hashable) -> int:
        """How far ``reader``'s range is mapped (-1: nothing yet)."""
        return self._covered.get(reader, -1)

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                wanted, self._wanted = self._wanted, {}
            for reader, start in wanted.items():
                try:
                    self._populate(reader, start)
                except Exception:
                    self._limited.log("error", "read_ahead_failed", exc_info=True)

    def _populate(self, reader: Hashable, start: int) -> None:
        covered = self._covered
        done = covered.get(reader, -1)
        pos = start if not start <= done <= start + 2 * self.ahead else done
        stop = start + self.ahead
        while pos < stop and not self._stopping:
            mf = self.mfq.find(pos)
            if mf is None or mf.closed or not mf.address:
                break
            at = pos - mf.file_from
            end = min(mf.wrote_pos, at + min(CHUNK, stop - pos))
            if end <= at:
                break
            aligned = at - at % mapped_file.PAGE_SIZE
            if mapped_file._madvise(mf.address + aligned, end - aligned, _MADV_POPULATE_READ) != 0:
                err = ctypes.get_errno()
                if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
                    global AVAILABLE
                    AVAILABLE = False
                    self._stopping = True
                    log.warning("read_ahead_unavailable", reason=f"madvise(MADV_POPULATE_READ): errno {err}")
                return  # (ENOMEM: the file went away meanwhile)
            self.populated += end - aligned
            pos = mf.file_from + end
            covered[reader] = pos
            covered.move_to_end(reader)
        while len(covered) > MAX_CURSORS:
            covered.popitem(last=False)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.join(timeout=30)
