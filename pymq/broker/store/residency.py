"""Cold commitlog reads: are a read's pages mapped, and bringing them in on another thread.

A pull answers with slices of the mapped commitlog; the pages are touched when the
transport copies them into the socket, on the event loop. For a backlog no longer in the
page cache that copy waits for the disk at page faults (also at "minor" ones: a page the
kernel's read-ahead is still reading in), and the loop stalls for everyone.

:class:`Residency` keeps, per 1 MiB block of the commitlog, when this process last mapped it
with ``madvise(MADV_POPULATE_READ)`` (Linux >= 5.14, through ctypes: the GIL is released;
the call returns once every page is read in and mapped). A cold read (ending more than
``COLD_LAG`` behind the commitlog end) that touches a block not mapped in the last
``FRESH_SECONDS`` is *missing*: the broker's pull handler then runs :meth:`Residency.prefault`
on a worker thread, which maps the read's blocks, and answers once it is done, so the loop's
copy takes no fault that waits for the disk; the next ``AHEAD_BLOCKS`` blocks are mapped on
the thread meanwhile (:meth:`Residency.prefault_after`), so a reader moving on usually finds
them mapped. A reader moving through a
backlog costs the loop one dict lookup per pull and one hand-off to the thread per MiB. The
store never waits itself (no asyncio here). Off Linux, or on kernels without the call,
nothing counts as missing. ``mincore(2)`` was not used: it reports a page the kernel's
read-ahead is still reading as present.

``madvise(MADV_WILLNEED)`` (start the kernel's read-ahead) and a read-ahead thread mapping
16 MiB ahead of each cold reader were tried first and did not move the figures
(``docs/STORE.md``).
"""

from __future__ import annotations

import ctypes
import errno
import time
from typing import TYPE_CHECKING

from pymq.broker.store import mapped_file

if TYPE_CHECKING:
    from pymq.broker.store.mapped_file import MappedFile
    from pymq.broker.store.mapped_file_queue import MappedFileQueue

_MADV_POPULATE_READ = 22  # Linux >= 5.14
BLOCK = 1 << 20
#: reads ending closer than this to the commitlog end are not checked (the tail was just written)
COLD_LAG = 8 << 20
#: a block mapped by prefault is trusted this long (the kernel may drop its pages later)
FRESH_SECONDS = 10.0
#: blocks mapped ahead of a cold read, on the thread, while it is answered
AHEAD_BLOCKS = 8
#: blocks remembered at most (the oldest half is dropped past it)
MAX_BLOCKS = 16_384


class Residency:
    """Which 1 MiB blocks of the commitlog this process mapped recently (so reads of them take no disk wait)."""

    def __init__(self, mfq: MappedFileQueue) -> None:
        self.mfq = mfq
        #: 1 MiB, or the file size when files are not a whole number of MiB (a block is in one file)
        self.block = BLOCK if mfq.file_size % BLOCK == 0 else mfq.file_size
        #: False once the kernel refused the call: nothing counts as missing from then on
        self.available = mapped_file._madvise is not None
        #: block number -> when this process last mapped it
        self._fresh: dict[int, float] = {}
        #: blocks brought in by prefault so far (stats, tests)
        self.prefaulted = 0

    def missing(self, start: int, end: int, commitlog_end: int) -> bool:
        """Whether cold read ``[start, end)`` touches a block not mapped recently (then :meth:`prefault` it)."""
        if end + COLD_LAG > commitlog_end or not self.available or end <= start:
            return False
        fresh = self._fresh
        now = time.monotonic()
        size = self.block
        for block in range(start // size, (end - 1) // size + 1):
            seen = fresh.get(block)
            if seen is None or now - seen >= FRESH_SECONDS:
                return True
        return False

    def prefault(self, start: int, end: int) -> None:
        """Read the blocks of ``[start, end)`` in and map them (waits for the disk: never on the event loop)."""
        size = self.block
        self._populate(start // size, (end - 1) // size + 1)

    def prefault_after(self, end: int) -> None:
        """Map the ``AHEAD_BLOCKS`` blocks after the one holding ``end - 1`` (while the read is answered)."""
        first = (end - 1) // self.block + 1
        self._populate(first, first + AHEAD_BLOCKS)

    def _populate(self, first: int, stop: int) -> None:
        fresh, now = self._fresh, time.monotonic()
        for block in range(first, stop):
            seen = fresh.get(block)
            if seen is not None and now - seen < FRESH_SECONDS / 2:
                continue  # (mapped moments ago, by an earlier call)
            span = self._span(block)
            if span is None or not self.available:
                continue
            mf, address, length = span
            failed = mapped_file._madvise(address, length, _MADV_POPULATE_READ) != 0
            if mf.closed:
                continue  # deleted meanwhile (the call then failed harmlessly)
            if failed:
                if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                    self.available = False
                continue
            self.prefaulted += 1
            self._remember(block, time.monotonic())

    def _span(self, block: int) -> tuple[MappedFile, int, int] | None:
        """The mapped file, start address and length of ``block``'s written part."""
        size = self.block
        pos = block * size
        mf = self.mfq.find(pos)
        if mf is None or mf.closed or not mf.address:
            return None
        at = pos - mf.file_from
        length = min(size, mf.wrote_pos - at)
        if length <= 0:
            return None
        return mf, mf.address + at, length

    def _remember(self, block: int, now: float) -> None:
        fresh = self._fresh
        fresh[block] = now
        if len(fresh) > MAX_BLOCKS:
            for old in list(fresh)[: MAX_BLOCKS // 2]:
                fresh.pop(old, None)  # (prefault and prefault_after may prune at the same time)
