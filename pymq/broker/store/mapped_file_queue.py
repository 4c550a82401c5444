"""The files of one log (the commitlog, or one consume queue), addressed by a global offset.

Files are :class:`~pymq.broker.store.mapped_file.MappedFile` s named by their start offset;
files a crash left half-created are removed at load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from pymq.broker.store.mapped_file import TMP_SUFFIX, MappedFile, file_name
from pymq.errors import StoreError


def remove_leftovers(directory: Path) -> None:
    """Delete files a crash left half-created in ``directory``."""
    for p in directory.iterdir():
        if p.name.endswith(TMP_SUFFIX):
            p.unlink(missing_ok=True)


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
        #: makes the file objects: ``new_file(path, size, create=..., lazy=...)`` (consume
        #: queues pass pooled files, see :mod:`pymq.broker.store.map_pool`)
        self.new_file: Callable[..., MappedFile] = MappedFile
        #: truncations so far: a sync planned before one must not mark data written after it flushed
        self.truncations = 0

    def load(self, *, lazy: bool = False) -> None:
        """Map the existing files (all marked full; recovery sets the real write positions).

        ``lazy`` (pooled files): only list them; each is opened, size-checked and mapped on first use.
        """
        if not self.directory.exists():
            return
        remove_leftovers(self.directory)
        names = sorted(p for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == 20)
        for path in names:
            if not lazy and path.stat().st_size != self.file_size:
                raise StoreError(
                    f"{path} is {path.stat().st_size} bytes but the configured file size is {self.file_size}"
                )
            mf = self.new_file(path, self.file_size, create=False, lazy=lazy)
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
                if nf is not None:
                    # Made for another position (cannot happen while the warmer runs): drop it.
                    self.next_file = None
                    nf.destroy()
                mf = self.new_file(self.directory / file_name(start), self.file_size, create=True)
                if self.warm:
                    mf.enable_warming(0)
            # Appended under the lock so that preallocate_next never sees the file list
            # without the file just taken (it would try to create the same file again).
            self.files.append(mf)
        return mf

    def preallocate_next(self) -> MappedFile | None:
        """Create the file after the last one ahead of time (warmer thread); None if not due."""
        with self.alloc_lock:
            last = self.files[-1] if self.files else None
            if last is None or self.next_file is not None:
                return None
            start = last.file_from + self.file_size
            mf = self.new_file(self.directory / file_name(start), self.file_size, create=True)
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

    def truncate(self, offset: int) -> int:
        """Make ``offset`` the end of the data: later files are deleted, the one holding it trimmed.

        Returns how many bytes of (non-zero) data were dropped.
        """
        self.truncations += 1
        keep = []
        dropped = 0
        for mf in self.files:
            if mf.file_from > offset:
                dropped += mf.data_bytes()
                mf.destroy()
                continue
            keep.append(mf)
            if offset < mf.file_to:
                dropped += mf.trim(offset - mf.file_from)
        self.files = keep
        return dropped

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
        extra = 1 if self.next_file is not None else 0
        return (len(self.files) + extra) * self.file_size

    def abandon(self) -> None:
        """Unmap every file without syncing, keeping a preallocated next file (what a crash leaves)."""
        for mf in self.files:
            mf.close()
        with self.alloc_lock:
            if self.next_file is not None:
                self.next_file.close()
                self.next_file = None
