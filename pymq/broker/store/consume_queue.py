"""Consume queues: per (topic, queueId), a fixed-width index into the commitlog.

Entry N sits at byte N*20 of the queue's log (``consumequeue/<topic>/<queueId>/<20-digit
byte offset>``)::

    0   i64  commitlog offset of the record
    8   i32  record size
    12  i64  tags code (crc32 of the tag; the delivery time in ms for the schedule topic)

Big-endian, like the commitlog. Each file holds ``consume_queue_file_entries`` entries
(300,000 by default, 6,000,000 bytes) and is named by the byte offset of its first entry.
An all-zero entry marks the end of the data. A gap before a queue's first entry (its first
file starts before the first offset it holds) is filled with ``(0, INT_MAX, 0)``. Entries
are written after the records they point to, in commitlog order.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.store.file_maker import MAKING
from pymq.broker.store.mapped_file import MappedFile
from pymq.broker.store.mapped_file_queue import MappedFileQueue

if TYPE_CHECKING:
    from pymq.broker.store.map_pool import MapPool

CQ_ENTRY = struct.Struct(">qiq")
#: the size field of a blank filler entry
BLANK_SIZE = 0x7FFFFFFF
CQ_ENTRY_SIZE = CQ_ENTRY.size  # 20
BLANK_ENTRY = CQ_ENTRY.pack(0, BLANK_SIZE, 0)
_ZERO_ENTRY = bytes(CQ_ENTRY_SIZE)


class ConsumeQueue:
    __slots__ = (
        "directory",
        "dirty",
        "entries_per_file",
        "file_size",
        "mfq",
        "min_offset",
        "queue_id",
        "restored",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        directory: Path,
        entries_per_file: int,
        *,
        pool: MapPool | None = None,
        dirty: set[ConsumeQueue] | None = None,
    ) -> None:
        """``pool``: map files lazily through it (many queues); ``dirty``: the set a write adds the queue
        to, so a flush pass syncs only queues written since the last one."""
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.entries_per_file = entries_per_file
        self.file_size = entries_per_file * CQ_ENTRY_SIZE
        self.mfq = MappedFileQueue(directory, self.file_size)
        if pool is not None:
            self.mfq.new_file = pool.new_file
        self.dirty = dirty
        self.min_offset = 0
        #: the ends came from the clean shutdown's record (:meth:`restore`), not from the files
        self.restored = False

    # --- offsets -----------------------------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        """The next entry number to be written (one past the last entry)."""
        return self.mfq.max_offset // CQ_ENTRY_SIZE

    # --- writing ------------------------------------------------------------------------------------------

    def append(self, entries: bytes | bytearray, first_offset: int) -> None:
        """Write consecutive entries starting at entry number ``first_offset``.

        Entries below the current end are skipped (re-dispatch after a crash); a start past
        the end is padded with blank entries.
        """
        files = self.mfq.files
        if files:
            mf = files[-1]
            wpos = mf.wrote_pos
            n = len(entries)
            if wpos + n <= mf.size and mf.file_from + wpos == first_offset * CQ_ENTRY_SIZE:
                # The common case (a new entry, a slave's run of them): at the end of the last file.
                if self.dirty is not None:
                    self.dirty.add(self)
                mf.buffer()[wpos : wpos + n] = entries
                mf.wrote_pos = wpos + n
                return
        end = self.max_offset
        if first_offset < end:
            skip = end - first_offset
            if skip * CQ_ENTRY_SIZE >= len(entries):
                return
            entries = entries[skip * CQ_ENTRY_SIZE :]
            first_offset = end
        if not self.mfq.files:
            self.min_offset = first_offset
        elif first_offset > end:
            self._write(BLANK_ENTRY * (first_offset - end), end)
        self._write(entries, first_offset)

    #: :meth:`append` of one entry at the queue's end (the master's per-message dispatch)
    append_next = append

    def _write(self, data: bytes | bytearray, first_offset: int) -> None:
        pos = first_offset * CQ_ENTRY_SIZE
        view = memoryview(data)
        if self.dirty is not None:
            self.dirty.add(self)
        while view:
            mf = self.mfq.writable_file(pos)
            mm = mf.buffer()  # a new file's pending buffer while it is being made (file_maker)
            if mf.file_from + mf.wrote_pos != pos:
                # A new queue's first file starts on a file boundary: pad up to ``pos``.
                pad_from = mf.file_from + mf.wrote_pos
                if pos > pad_from:
                    blank = BLANK_ENTRY * ((pos - pad_from) // CQ_ENTRY_SIZE)
                    mm[mf.wrote_pos : mf.wrote_pos + len(blank)] = blank
                    mf.wrote_pos += len(blank)
                    if mf.wrote_pos >= mf.size:
                        continue
            n = min(len(view), mf.size - mf.wrote_pos)
            mm[mf.wrote_pos : mf.wrote_pos + n] = view[:n]
            mf.wrote_pos += n
            pos += n
            view = view[n:]

    # --- reading ------------------------------------------------------------------------------------------

    def read_entries(self, offset: int, max_entries: int) -> bytes | bytearray | memoryview:
        """Raw entries from ``offset``, at most ``max_entries``, never crossing a file end."""
        pos = offset * CQ_ENTRY_SIZE
        mf = self.mfq.find(pos)
        if mf is None:
            return b""
        start = pos - mf.file_from
        end = min(mf.wrote_pos, start + max_entries * CQ_ENTRY_SIZE)
        if end <= start:
            return b""
        return mf.buffer()[start:end]

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        raw = self.read_entries(offset, 1)
        if len(raw) < CQ_ENTRY_SIZE:
            return None
        return CQ_ENTRY.unpack(raw)

    def last_entry(self) -> tuple[int, int, int] | None:
        end = self.max_offset
        if end <= self.min_offset:
            return None
        return self.entry(end - 1)

    # --- recovery and cleanup -------------------------------------------------------------------------------

    def recover(self) -> None:
        """Find the end of the valid entries (all files are loaded marked full)."""
        self.mfq.load(lazy=self.mfq.new_file is not MappedFile)
        files = self.mfq.files
        if not files:
            return
        # The last file with any entry holds the end; later (empty) files are dropped.
        for mf in reversed(files):
            if mf.view()[0:CQ_ENTRY_SIZE] != _ZERO_ENTRY:
                end = self._scan_end(mf)
                self.mfq.truncate(mf.file_from + end)
                break
        else:
            self.mfq.truncate(files[0].file_from)
        self.min_offset = self.mfq.min_offset // CQ_ENTRY_SIZE
        # Skip leading blank fillers for the min offset.
        while self.min_offset < self.max_offset:
            e = self.entry(self.min_offset)
            if e is None or e[1] != BLANK_SIZE:
                break
            self.min_offset += 1

    def restore(self, min_offset: int, max_offset: int) -> bool:
        """Take the ends a clean shutdown recorded, mapping nothing (pooled files only).

        False (nothing changed) if the files on disk do not fit them: then :meth:`recover`.
        """
        if self.mfq.new_file is MappedFile:
            return False
        self.mfq.load(lazy=True)
        files = self.mfq.files
        end = max_offset * CQ_ENTRY_SIZE
        if not files or not files[0].file_from <= end <= files[-1].file_to or min_offset > max_offset:
            for mf in files:
                mf.close()
            self.mfq.files = []
            return False
        keep = []
        for mf in files:
            if mf.file_from > end:
                mf.destroy()  # an empty file past the end (as recover() drops)
                continue
            mf.wrote_pos = mf.flushed_pos = min(mf.size, end - mf.file_from)
            keep.append(mf)
        self.mfq.files = keep
        self.min_offset = min_offset
        self.restored = True
        return True

    @staticmethod
    def _scan_end(mf) -> int:  # type: ignore[no-untyped-def]
        # Entries are written in order; binary search for the first all-zero entry.
        lo, hi = 0, mf.size // CQ_ENTRY_SIZE
        mm = mf.view()
        while lo < hi:
            mid = (lo + hi) // 2
            p = mid * CQ_ENTRY_SIZE
            if mm[p : p + CQ_ENTRY_SIZE] != _ZERO_ENTRY:
                lo = mid + 1
            else:
                hi = mid
        return lo * CQ_ENTRY_SIZE

    def truncate_beyond(self, max_phys: int) -> int:
        """Drop trailing entries whose record ends past ``max_phys``; returns how many went."""
        lo, hi = self.min_offset, self.max_offset
        # Entries are ordered by commitlog offset (blank fillers only lead): binary search
        # the first one that ends past max_phys, then truncate once.
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and (e[1] == BLANK_SIZE or e[0] + e[1] <= max_phys):
                lo = mid + 1
            else:
                hi = mid
        dropped = self.max_offset - lo
        if dropped > 0:
            self.truncate_to(lo)
        return dropped

    def truncate_to(self, offset: int) -> None:
        """Make ``offset`` the end of the queue (later entries are zeroed or their files deleted)."""
        files = self.mfq.files
        pos = offset * CQ_ENTRY_SIZE
        if files and pos < files[0].file_from:
            # Keep the first file, empty, so that the queue's offsets never restart at 0.
            pos = files[0].file_from
        self.mfq.truncate(pos)
        self.min_offset = min(self.min_offset, self.max_offset)

    def fix_entry(self, offset: int, entry: bytes) -> bool:
        """Overwrite entry ``offset`` (below the end) if it differs from ``entry``; True if it did."""
        pos = offset * CQ_ENTRY_SIZE
        mf = self.mfq.find(pos)
        if mf is None or pos - mf.file_from + CQ_ENTRY_SIZE > mf.wrote_pos:
            return False
        at = pos - mf.file_from
        mm = mf.view()
        if mm[at : at + CQ_ENTRY_SIZE] == entry:
            return False
        mm[at : at + CQ_ENTRY_SIZE] = entry
        if self.dirty is not None:
            self.dirty.add(self)
        return True

    def max_phys_end(self) -> int:
        """The commitlog offset just past the last record this queue references."""
        e = self.last_entry()
        if e is None or e[1] == BLANK_SIZE:
            return 0
        return e[0] + e[1]

    def delete_expired(self, min_phys: int) -> int:
        """Delete files whose every entry points below ``min_phys``; move the min offset up.

        A file still being made (:mod:`pymq.broker.store.file_maker`) is judged by its
        buffered entries: expired, it is dropped without ever being created (cleanup never
        makes a file only to delete it, which under a full disk would also fail the pass);
        one the maker is creating right now is left for the next pass.
        """
        deleted = 0
        files = self.mfq.files
        while len(files) > 1:
            mf = files[0]
            if getattr(mf, "making", 0) == MAKING:
                break  # (deleting it would wait for its creation, holding the store lock)
            buf = mf.buffer()  # a pending file's buffer: never makes the file
            if len(buf) < mf.size:
                break  # (an earlier file is full: a shorter buffer cannot be expired)
            last = CQ_ENTRY.unpack_from(buf, mf.size - CQ_ENTRY_SIZE)
            # A file whose last entry is a blank filler holds nothing but fillers.
            if last[1] == BLANK_SIZE or last[0] + last[1] <= min_phys:
                self.mfq.delete_first(1)
                files = self.mfq.files
                deleted += 1
            else:
                break
        self.correct_min_offset(min_phys)
        return deleted

    def correct_min_offset(self, min_phys: int) -> None:
        """Advance the min offset past entries whose records were deleted from the commitlog."""
        lo = max(self.min_offset, self.mfq.min_offset // CQ_ENTRY_SIZE)
        hi = self.max_offset
        # Entries are ordered by commitlog offset: binary search the first one still present.
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and (e[1] == BLANK_SIZE or e[0] < min_phys):
                lo = mid + 1
            else:
                hi = mid
        self.min_offset = lo

    def flush(self) -> bool:
        """Sync the written entries; False if some are in a file still being made (not on disk yet)."""
        # Looked at before syncing: a file the maker adopts meanwhile was skipped by this sync.
        unmade = any(getattr(mf, "pending", None) is not None for mf in self.mfq.files)
        self.mfq.flush()
        return not unmade

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        for mf in list(self.mfq.files):
            mf.destroy()
        self.mfq.files = []
        try:
            self.directory.rmdir()
            self.directory.parent.rmdir()
        except OSError:
            pass
