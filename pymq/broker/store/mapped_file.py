"""Fixed-size memory-mapped files (queues of them: :mod:`pymq.broker.store.mapped_file_queue`).

A file is named by its start offset, 20 digits zero-padded. Files are preallocated with
``posix_fallocate`` when created so that a full disk shows up as a clean error here,
never as SIGBUS on a write through the mapping.

Flushing an append-only file syncs only the range written since the last flush, with
``msync(MS_SYNC)`` called through ctypes (which, unlike ``mmap.flush``, releases the GIL);
on Linux that is ``fdatasync`` restricted to the range. Syncing the whole file instead
would also write back the zero pages the warmer dirtied ahead of the writer, leaving them
clean and write-protected, so the writer would take a page fault on each of them again.
Files written anywhere (index files) use ``fdatasync``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import threading
from pathlib import Path

from pymq.errors import DiskFullError, StoreError

PAGE_SIZE = mmap.PAGESIZE
#: errnos that mean the disk (or the quota) is full: DiskFullError, not a broken store
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_MS_SYNC = 4  # Linux
_MADV_POPULATE_WRITE = 23  # Linux >= 5.14


def _libc_function(name: str, argtypes: list[type]):  # type: ignore[no-untyped-def]
    """A libc function through ctypes (calls release the GIL), or None off Linux."""
    if os.uname().sysname != "Linux":
        return None
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


_msync = _libc_function("msync", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])
_madvise = _libc_function("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])
#: False once the kernel refused MADV_POPULATE_WRITE: warm with pwrite instead
_populate_ok = _madvise is not None


def ranged_msync_available() -> bool:
    """Whether files get a mapping address and flushes msync by it (Linux with ctypes)."""
    return _msync is not None


def populate(address: int, length: int) -> bool:
    """Prefault ``length`` bytes of a shared mapping for writing (MADV_POPULATE_WRITE); False if refused."""
    if not _populate_ok or not address:
        return False
    return bool(_madvise(address, length, _MADV_POPULATE_WRITE) == 0)


def _address(mm: mmap.mmap) -> int:
    """The mapping's start address (the temporary buffer export is released at once)."""
    c = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(c)
    finally:
        del c


#: Held while this process preallocates a file (``posix_fallocate``, and removing it if that
#: fails). A failing fallocate holds the blocks it got until it gives up, so for that moment
#: the file system looks (up to 100 %) full; disk-use measurements take this lock so they
#: never see it (see :func:`pymq.broker.store.cleanup.disk_ratio`).
ALLOCATION_LOCK = threading.Lock()


def file_name(offset: int) -> str:
    return f"{offset:020d}"


_ZERO_CHUNK = bytes(1 << 20)

#: The writer reserves room ahead of itself in steps of this size (see :meth:`MappedFile.reserve`).
RESERVE_STEP = 4 << 20
#: a file being created (see MappedFile); leftovers from a crash are removed at load
TMP_SUFFIX = ".creating"
WARM_CHUNK = 8 << 20
_WARM_ZEROS = memoryview(bytes(WARM_CHUNK))
#: write-back of warmed pages (SYNC_FLUSH) in pieces this big, so a sync senders wait for
#: queues behind one piece at most (~0.2 ms of this disk), not behind a whole chunk
WRITE_BACK_PIECE = 256 << 10
#: prefault by pwrite in pieces this big: a write holds the file's inode lock throughout, and the
#: loop's own pwrite of a record (SYNC_FLUSH) waits for it (8 MiB at once: stalls of milliseconds)
PREFAULT_PIECE = 64 << 10


def store_error(exc: OSError, message: str) -> StoreError:
    """``exc`` as the store reports it: DiskFullError for a full disk or quota, else StoreError."""
    error = DiskFullError if exc.errno in _NO_SPACE else StoreError
    return error(f"{message}: {exc.strerror or exc}")


def data_extent(mm: mmap.mmap, start: int, end: int) -> int:
    """How many bytes from ``start`` run to the last non-zero byte before the first all-zero chunk."""
    pos = start
    extent = 0
    while pos < end:
        n = min(len(_ZERO_CHUNK), end - pos)
        chunk = bytes(mm[pos : pos + n])  # (no copy for an mmap's bytes)
        if chunk == _ZERO_CHUNK[:n]:
            break
        extent = pos - start + len(chunk.rstrip(b"\x00"))
        pos += n
    return extent


def zero_tail(mm: mmap.mmap, start: int, end: int) -> int:
    """Zero ``mm[start:end]`` up to the first chunk that is zero already; returns the bytes of data dropped.

    Dropped data (a torn write, entries past a truncation point) is zeroed so a later
    recovery cannot mistake it for valid data; preallocated space past it is zero already,
    so the work stays proportional to what was dropped, not to the file size. The count
    returned runs from ``start`` to the last non-zero byte cleared.
    """
    dropped = data_extent(mm, start, end)
    pos, stop = start, start + dropped
    while pos < stop:
        n = min(len(_ZERO_CHUNK), stop - pos)
        mm[pos : pos + n] = _ZERO_CHUNK[:n]
        pos += n
    return dropped


class MappedFile:
    """One fixed-size mmap'd file. ``wrote_pos`` is the end of valid data within it."""

    __slots__ = (
        "address",
        "closed",
        "fd",
        "file_from",
        "flushed_pos",
        "mm",
        "path",
        "ranged_sync",
        "reserved",
        "size",
        "warm_busy",
        "warm_lock",
        "warm_pos",
        "wrote_pos",
    )

    mm: mmap.mmap

    def __init__(self, path: Path, size: int, *, create: bool, lazy: bool = False) -> None:
        """Open (or ``create``) and map the file; ``lazy``: only describe it (a subclass maps it on first use)."""
        self.path = path
        self.size = size
        self.file_from = int(path.name) if path.name.isdigit() else 0
        self.wrote_pos = 0
        self.flushed_pos = 0
        self.closed = False
        #: flush syncs only the range written since the last flush (append-only files)
        self.ranged_sync = True
        # Warming is off until enable_warming(): the whole file counts as reserved.
        self.reserved = size
        self.warm_pos = size
        self.warm_lock: threading.Condition | None = None
        #: the chunk the warmer is writing right now, as (start, end); (0, 0) when idle
        self.warm_busy = (0, 0)
        self.fd = -1
        self.address = 0
        if create and path.exists():
            raise StoreError(f"cannot create {path}: it exists")
        if not lazy:
            self._map(create)

    def _open(self, create: bool) -> int:
        """Open (``create``: allocate under a temporary name and rename into place) and check the size."""
        # A new file is allocated under a temporary name and renamed into place, so that a
        # crash mid-creation never leaves a short file under a real name.
        path, size = self.path, self.size
        open_path = path.with_name(path.name + TMP_SUFFIX) if create else path
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        try:
            try:
                fd = os.open(open_path, flags, 0o644)
            except FileNotFoundError:
                if not create:
                    raise
                # A new queue's directory is made with its first file (off the loop: file_maker).
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(open_path, flags, 0o644)
        except OSError as exc:
            raise store_error(exc, f"cannot open {open_path}") from exc
        try:
            if create:
                with ALLOCATION_LOCK:
                    try:
                        os.posix_fallocate(fd, 0, size)
                    except OSError as exc:
                        with contextlib.suppress(OSError):
                            os.ftruncate(fd, 0)  # give the blocks back before anyone measures
                        raise store_error(exc, f"cannot allocate {size} bytes for {path}") from exc
                os.rename(open_path, path)
            else:
                actual = os.fstat(fd).st_size
                if actual != size:
                    raise StoreError(f"{path} is {actual} bytes, expected {size}")
        except BaseException:
            os.close(fd)
            if create:
                open_path.unlink(missing_ok=True)
                path.unlink(missing_ok=True)
            raise
        return fd

    def _map(self, create: bool) -> None:
        self.fd = self._open(create)
        try:
            self.mm = mmap.mmap(self.fd, self.size, access=mmap.ACCESS_WRITE)
            #: the mapping's address, for msync and madvise through ctypes (0: not available)
            self.address = _address(self.mm) if _msync is not None or _madvise is not None else 0
        except BaseException:
            os.close(self.fd)
            if create:
                self.path.unlink(missing_ok=True)
            raise

    def view(self) -> mmap.mmap:
        """The mapping (a pooled file maps itself here when it is not mapped)."""
        return self.mm

    def buffer(self) -> mmap.mmap | bytearray:
        """The bytes to append to and read from (a pooled file being made answers its pending buffer)."""
        return self.mm

    @property
    def file_to(self) -> int:
        return self.file_from + self.size

    @property
    def remaining(self) -> int:
        return self.size - self.wrote_pos

    @property
    def is_full(self) -> bool:
        return self.wrote_pos >= self.size

    # --- warming ------------------------------------------------------------------------------------------
    #
    # The first write to each page of a new file costs a page fault; on this VM, faults on
    # memory not touched since boot make memcpy into the mapping run at ~400 MB/s, and even
    # on page-cache pages each write fault costs a trap. A warmer thread maps the pages
    # ahead of the writer with madvise(MADV_POPULATE_WRITE) through ctypes (which releases
    # the GIL, unlike mmap.madvise), so the writer's copies take no faults at all. Where that
    # is refused (kernels before 5.14) it pre-writes zeros with pwrite instead, which at
    # least puts the pages in the page cache.
    #
    # Populating never changes the bytes, but pwrite does, so the two threads never work
    # on the same range: the writer only writes below ``reserved`` and moves it only under
    # ``warm_lock``, waiting if the chunk the warmer is on would fall inside its new
    # reservation; the warmer only claims chunks at or above ``reserved``. Neither holds
    # the lock during the system call.

    def enable_warming(self, start: int) -> None:
        self.warm_lock = threading.Condition(threading.Lock())
        self.reserved = start
        self.warm_pos = start

    def reserve(self, end: int) -> None:
        """Claim ``[.., end)`` for the writer before it writes there (callers check ``end > reserved``)."""
        cond = self.warm_lock
        if cond is None:
            return
        with cond:
            new = min(self.size, max(self.reserved, end + RESERVE_STEP))
            while self.warm_busy[0] < new and self.warm_busy[1] > self.reserved:
                cond.wait()
            self.reserved = new

    def warm_step(self, ahead: int, write_back: bool = False, by_pwrite: bool = False) -> bool:
        """Pre-fault one chunk ahead of the writer; False when there is nothing to do.

        ``write_back`` (SYNC_FLUSH): then sync the chunk's zeroed pages to disk, see :meth:`_write_back`.
        ``by_pwrite`` (the commitlog writes with pwrite): prefault by writing zeros with pwrite,
        not through the mapping, whose dirtied pages make their syncs (the write-back's) dearer.
        """
        cond = self.warm_lock
        if cond is None or self.closed:
            return False
        with cond:
            if self.closed:
                return False
            start = max(self.warm_pos, self.reserved)
            limit = min(self.size, self.reserved + ahead)
            if start >= limit:
                return False
            end = start + min(WARM_CHUNK, limit - start)
            self.warm_busy = (start, end)
        try:
            self._prefault(start, end, by_pwrite)
        finally:
            with cond:
                self.warm_busy = (0, 0)
                self.warm_pos = end
                cond.notify_all()
        if write_back:
            self._write_back(start, end)
        return True

    def _write_back(self, start: int, end: int) -> None:
        """Sync prefaulted (zero) pages ahead of the writer, so that its syncs find the blocks written.

        A preallocated file's blocks are *unwritten* extents on ext4 (and XFS): the first sync
        of each block converts it, a journal commit that made every SYNC_FLUSH msync here take
        ~150-190 us instead of ~95 (benchmarks/msync_extents_bench.py). Writing the zeros
        back ahead of time does the conversions off the senders' path, at the price of writing
        the commitlog twice (RocketMQ's warmMappedFile flushes while warming under SYNC_FLUSH
        too). Runs outside ``warm_busy``: the writer may already write here; its own syncs
        cover its bytes whatever this one wrote. Best effort: skipped where msync by address
        is not available, and a failure only costs the speed-up.
        """
        if _msync is None or not self.address:
            return
        aligned = start - start % PAGE_SIZE
        pos = aligned
        while pos < end and not self.closed:
            n = min(WRITE_BACK_PIECE, end - pos)
            # (a file closed meanwhile: msync of an unmapped range fails with ENOMEM, nothing else)
            if _msync(self.address + pos, n, _MS_SYNC) != 0:
                return
            pos += n

    def _prefault(self, start: int, end: int, by_pwrite: bool = False) -> None:
        global _populate_ok
        if _populate_ok and self.address and not by_pwrite:
            aligned = start - start % PAGE_SIZE
            if _madvise(self.address + aligned, end - aligned, _MADV_POPULATE_WRITE) == 0:
                return
            err = ctypes.get_errno()
            if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
                _populate_ok = False  # not supported here: pwrite from now on
            else:
                raise OSError(err, f"madvise {self.path}: {os.strerror(err)}")
        pos = start
        while pos < end and not self.closed:
            n = min(PREFAULT_PIECE, end - pos)
            os.pwrite(self.fd, _WARM_ZEROS[:n], pos)  # (best effort: a short write only prefaults less)
            pos += n

    @property
    def warmed(self) -> bool:
        """Nothing left to warm: every byte is prefaulted or already claimed by the writer."""
        return max(self.warm_pos, self.reserved) >= self.size

    def dirty_range(self) -> tuple[int, int] | None:
        """``(start, end)``: what a flush syncs now (written since the last flush, from its page); None: nothing."""
        target = self.wrote_pos
        flushed = self.flushed_pos
        if target <= flushed or self.closed:
            return None
        return flushed - flushed % PAGE_SIZE, target

    def mark_flushed(self, pos: int) -> None:
        """Record that the file is durable up to ``pos``; it only moves forward: the commitlog is
        flushed on two threads (the flusher's, and SYNC_FLUSH's C syncer, see
        :mod:`pymq.broker.store.sync_plan`), both recording under the store's file lock. Only a
        truncation (:meth:`trim`) moves it back."""
        if pos > self.flushed_pos:
            self.flushed_pos = pos

    def flush(self) -> int:
        """Sync what was written since the last flush; returns the position now durable."""
        dirty = self.dirty_range()
        if dirty is not None:
            start, target = dirty
            if self.ranged_sync and self.address and _msync is not None:
                if _msync(self.address + start, target - start, _MS_SYNC) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"msync {self.path}: {os.strerror(err or errno.EIO)}")
            else:
                os.fdatasync(self.fd)
            self.mark_flushed(target)
        return self.flushed_pos

    def sync_all(self) -> None:
        """``fdatasync`` the whole file (after writes below ``flushed_pos``, e.g. by recovery)."""
        if not self.closed:
            os.fdatasync(self.fd)

    def close(self) -> None:
        if self.closed:
            return
        cond = self.warm_lock
        if cond is not None:
            # Let a warming step in flight finish: it uses the mapping and the descriptor.
            with cond:
                self.closed = True
                while self.warm_busy != (0, 0):
                    cond.wait()
        self.closed = True
        try:
            self.mm.close()
        except BufferError:
            # A reader still holds a view (e.g. a pull response being written). The mapping
            # goes away with the last reference; the file descriptor can close now.
            pass
        os.close(self.fd)

    def data_bytes(self) -> int:
        """Bytes of data the file holds (up to its last non-zero byte before an all-zero chunk)."""
        return data_extent(self.view(), 0, self.size)

    def trim(self, end: int) -> int:
        """Make ``end`` the end of the data (the rest zeroed); returns the bytes of data dropped."""
        dropped = zero_tail(self.view(), end, self.size)
        self.wrote_pos = end
        self.flushed_pos = min(self.flushed_pos, end)
        return dropped

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def mtime(self) -> float:
        try:
            return self.path.stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def touch(self) -> None:
        try:
            os.utime(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"<MappedFile {self.path.name} wrote={self.wrote_pos}/{self.size}>"
