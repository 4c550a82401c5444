"""Fixed-size memory-mapped files, and queues of them addressed by a global offset.

A file is named by its start offset, 20 digits zero-padded. Files are preallocated with
``posix_fallocate`` when created so that a full disk shows up as a clean error here,
never as SIGBUS on a write through the mapping. Flushing uses ``fdatasync`` on the file
descriptor, which on Linux also writes back pages dirtied through a shared mapping and,
unlike ``mmap.flush``, releases the GIL.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from pymq.errors import StoreError


def file_name(offset: int) -> str:
    return f"{offset:020d}"


_ZERO_CHUNK = bytes(1 << 20)

#: The writer reserves room ahead of itself in steps of this size (see :meth:`MappedFile.reserve`).
RESERVE_STEP = 4 << 20
WARM_CHUNK = 256 * 1024


def zero_tail(mm: mmap.mmap, start: int, end: int) -> None:
    """Zero ``mm[start:end]`` up to the first chunk that is zero already.

    Dropped data (a torn write, entries past a truncation point) is zeroed so a later
    recovery cannot mistake it for valid data; preallocated space past it is zero already,
    so the work stays proportional to what was dropped, not to the file size.
    """
    pos = start
    while pos < end:
        n = min(len(_ZERO_CHUNK), end - pos)
        if mm[pos : pos + n] == _ZERO_CHUNK[:n]:
            return
        mm[pos : pos + n] = _ZERO_CHUNK[:n]
        pos += n


class MappedFile:
    """One fixed-size mmap'd file. ``wrote_pos`` is the end of valid data within it."""

    __slots__ = (
        "closed",
        "fd",
        "file_from",
        "flushed_pos",
        "mm",
        "path",
        "reserved",
        "size",
        "warm_busy",
        "warm_lock",
        "warm_pos",
        "wrote_pos",
    )

    def __init__(self, path: Path, size: int, *, create: bool) -> None:
        self.path = path
        self.size = size
        self.file_from = int(path.name) if path.name.isdigit() else 0
        self.wrote_pos = 0
        self.flushed_pos = 0
        self.closed = False
        # Warming is off until enable_warming(): the whole file counts as reserved.
        self.reserved = size
        self.warm_pos = size
        self.warm_lock: threading.Condition | None = None
        #: the chunk the warmer is writing right now, as (start, end); (0, 0) when idle
        self.warm_busy = (0, 0)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            self.fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc
        try:
            if create:
                try:
                    os.posix_fallocate(self.fd, 0, size)
                except OSError as exc:
                    raise StoreError(f"cannot allocate {size} bytes for {path}: {exc}") from exc
            else:
                actual = os.fstat(self.fd).st_size
                if actual != size:
                    raise StoreError(f"{path} is {actual} bytes, expected {size}")
            self.mm = mmap.mmap(self.fd, size, access=mmap.ACCESS_WRITE)
        except BaseException:
            os.close(self.fd)
            if create:
                path.unlink(missing_ok=True)
            raise

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
    # The first write to each page of a new file costs a page fault that, on a VM, makes
    # memcpy into the mapping run at ~400 MB/s. A warmer thread pre-writes zeros with
    # pwrite (which releases the GIL) ahead of the writer, so the writer finds the pages in
    # the page cache. The two never touch the same bytes: the writer only writes below
    # ``reserved`` and moves it only under ``warm_lock``, waiting if the chunk the warmer is
    # writing would fall inside its new reservation; the warmer only claims chunks at or
    # above ``reserved``. Neither holds the lock during I/O.

    def enable_warming(self, start: int) -> None:
        self.warm_lock = threading.Condition(threading.Lock())
        self.reserved = start
        self.warm_pos = start

    def reserve(self, end: int) -> None:
        """Claim ``[.., end)`` for the writer before writing there (writers check ``end > reserved`` first)."""
        cond = self.warm_lock
        if cond is None:
            return
        with cond:
            new = min(self.size, max(self.reserved, end + RESERVE_STEP))
            while self.warm_busy[0] < new and self.warm_busy[1] > self.reserved:
                cond.wait()
            self.reserved = new

    def warm_step(self, ahead: int) -> bool:
        """Pre-fault one chunk ahead of the writer; False when there is nothing to do."""
        cond = self.warm_lock
        if cond is None or self.closed:
            return False
        with cond:
            start = max(self.warm_pos, self.reserved)
            limit = min(self.size, self.reserved + ahead)
            if start >= limit:
                return False
            end = start + min(WARM_CHUNK, limit - start)
            self.warm_busy = (start, end)
        try:
            os.pwrite(self.fd, _ZERO_CHUNK[: end - start], start)
        finally:
            with cond:
                self.warm_busy = (0, 0)
                self.warm_pos = end
                cond.notify_all()
        return True

    @property
    def warmed(self) -> bool:
        return self.warm_pos >= self.size

    def flush(self) -> int:
        """Sync everything written so far; returns the position now durable."""
        target = self.wrote_pos
        if target > self.flushed_pos and not self.closed:
            os.fdatasync(self.fd)
            self.flushed_pos = target
        return self.flushed_pos

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.mm.close()
        except BufferError:
            # A reader still holds a view (e.g. a pull response being written). The mapping
            # goes away with the last reference; the file descriptor can close now.
            pass
        os.close(self.fd)

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


class MappedFileQueue:
    """The files of one log (the commitlog, or one consume queue), ordered by start offset."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        #: a file created ahead of time by the warmer, handed to the writer at the next roll
        self.next_file: MappedFile | None = None
        self.alloc_lock = threading.Lock()
        #: new files get warming enabled (the commitlog; see MappedFile.enable_warming)
        self.warm = False

    def load(self) -> None:
        """Map the existing files (all marked full; recovery sets the real write positions)."""
        if not self.directory.exists():
            return
        names = sorted(p for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == 20)
        for path in names:
            if path.stat().st_size != self.file_size:
                raise StoreError(
                    f"{path} is {path.stat().st_size} bytes but the configured file size is {self.file_size}"
                )
            mf = MappedFile(path, self.file_size, create=False)
            mf.wrote_pos = mf.flushed_pos = self.file_size
            self.files.append(mf)
        for prev, nxt in zip(self.files, self.files[1:], strict=False):
            if nxt.file_from != prev.file_from + self.file_size:
                raise StoreError(f"gap between {prev.path} and {nxt.path}")

    def __iter__(self) -> Iterator[MappedFile]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def create_file(self, start: int) -> MappedFile:
        if start % self.file_size:
            raise StoreError(f"file start {start} is not a multiple of {self.file_size}")
        with self.alloc_lock:
            nf = self.next_file
            if nf is not None and nf.file_from == start:
                self.next_file = None
                mf = nf
            else:
                self.directory.mkdir(parents=True, exist_ok=True)
                mf = MappedFile(self.directory / file_name(start), self.file_size, create=True)
                if self.warm:
                    mf.enable_warming(0)
        self.files.append(mf)
        return mf

    def preallocate_next(self) -> MappedFile | None:
        """Create the file after the last one ahead of time (warmer thread); None if not due."""
        with self.alloc_lock:
            last = self.files[-1] if self.files else None
            if last is None or self.next_file is not None:
                return None
            start = last.file_from + self.file_size
            mf = MappedFile(self.directory / file_name(start), self.file_size, create=True)
            mf.enable_warming(0)
            self.next_file = mf
            return mf

    def writable_file(self, start_if_empty: int = 0) -> MappedFile:
        """The file to append to: the last one, or a new one once it is full."""
        last = self.files[-1] if self.files else None
        if last is None:
            return self.create_file(start_if_empty - start_if_empty % self.file_size)
        if last.wrote_pos >= self.file_size:
            return self.create_file(last.file_from + self.file_size)
        return last

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, if it is still there."""
        files = self.files
        if not files:
            return None
        idx = (offset - files[0].file_from) // self.file_size
        if 0 <= idx < len(files):
            return files[idx]
        return None

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from if self.files else 0

    @property
    def max_offset(self) -> int:
        last = self.files[-1] if self.files else None
        return last.file_from + last.wrote_pos if last else 0

    @property
    def flushed_offset(self) -> int:
        for mf in reversed(self.files):
            if mf.flushed_pos:
                return mf.file_from + mf.flushed_pos
        return self.min_offset

    def truncate(self, offset: int) -> None:
        """Make ``offset`` the end of the data: later files are deleted, the one holding it trimmed."""
        keep = []
        for mf in self.files:
            if mf.file_from > offset:
                mf.destroy()
                continue
            keep.append(mf)
            if offset < mf.file_to:
                end = offset - mf.file_from
                zero_tail(mf.mm, end, mf.size)
                mf.wrote_pos = end
                mf.flushed_pos = min(mf.flushed_pos, end)
        self.files = keep

    def delete_first(self, count: int = 1) -> list[MappedFile]:
        gone, self.files = self.files[:count], self.files[count:]
        for mf in gone:
            mf.destroy()
        return gone

    def flush(self) -> int:
        """Flush every file with unflushed data; returns the flushed global offset."""
        for mf in list(self.files):
            if mf.wrote_pos > mf.flushed_pos and not mf.closed:
                mf.flush()
        return self.flushed_offset

    def dirty_bytes(self) -> int:
        return sum(mf.wrote_pos - mf.flushed_pos for mf in self.files if not mf.closed)

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        with self.alloc_lock:
            if self.next_file is not None:
                # Unused: remove it so a restart does not see an empty file past the end.
                self.next_file.destroy()
                self.next_file = None

    def disk_bytes(self) -> int:
        return len(self.files) * self.file_size
