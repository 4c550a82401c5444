"""The commitlog: every record of every topic, appended to one sequence of mapped files.

A record never spans two files. When the next record plus an 8-byte blank marker does not
fit in the current file, the rest of the file gets the blank marker
(:func:`pymq.protocol.record.blank_marker`) and writing continues in a new file.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from pymq.broker.store.mapped_file import MappedFile, MappedFileQueue
from pymq.protocol.record import BLANK_MAGIC, BODY_POS, HEAD, MAGIC, MIN_RECORD_SIZE, blank_marker

BLANK_MIN = 8
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_CRC_AND_LEN = struct.Struct(">I")


class CommitLog:
    def __init__(self, directory: Path, file_size: int) -> None:
        self.mfq = MappedFileQueue(directory, file_size)
        self.mfq.warm = True
        self.file_size = file_size

    @property
    def min_offset(self) -> int:
        return self.mfq.min_offset

    @property
    def max_offset(self) -> int:
        return self.mfq.max_offset

    def file_for_append(self, size: int) -> MappedFile:
        """The file the next record of ``size`` bytes goes to, rolling over if needed."""
        mf = self.mfq.writable_file(0)
        if mf.wrote_pos + size + BLANK_MIN > mf.size:
            free = mf.size - mf.wrote_pos
            if free >= BLANK_MIN:
                if mf.wrote_pos + BLANK_MIN > mf.reserved:
                    mf.reserve(mf.wrote_pos + BLANK_MIN)
                mf.mm[mf.wrote_pos : mf.wrote_pos + BLANK_MIN] = blank_marker(free)
            mf.wrote_pos = mf.size
            mf = self.mfq.writable_file(0)
        return mf

    def read(self, phys: int, size: int) -> memoryview | None:
        mf = self.mfq.find(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from
        if pos + size > mf.wrote_pos:
            return None
        return memoryview(mf.mm)[pos : pos + size]

    def read_record(self, phys: int) -> memoryview | None:
        """The whole record at ``phys``, or None if there is none."""
        mf = self.mfq.find(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from
        if pos + MIN_RECORD_SIZE > mf.wrote_pos:
            return None
        size, magic = HEAD.unpack_from(mf.mm, pos)
        if magic != MAGIC or size < MIN_RECORD_SIZE or pos + size > mf.wrote_pos:
            return None
        return memoryview(mf.mm)[pos : pos + size]

    def scan(self, start: int, check_crc: bool) -> Iterator[tuple[MappedFile, int, int]]:
        """Yield ``(file, pos, size)`` for each valid record from ``start`` (a record boundary).

        Stops at the first invalid record; the caller reads :attr:`scan_end` afterwards.
        Blank markers move to the next file.
        """
        self.scan_end = start
        mf = self.mfq.find(start)
        if mf is None:
            return
        idx = self.mfq.files.index(mf)
        pos = start - mf.file_from
        files = self.mfq.files
        unpack_head = HEAD.unpack_from
        unpack_i32 = _I32.unpack_from
        unpack_u32 = _CRC_AND_LEN.unpack_from
        unpack_u16 = _U16.unpack_from
        crc32 = zlib.crc32
        while True:
            mm = mf.mm
            limit = mf.size
            view = memoryview(mm)
            while pos + BLANK_MIN <= limit:
                size, magic = unpack_head(mm, pos)
                if magic == BLANK_MAGIC:
                    pos = limit
                    break
                if magic != MAGIC or size < MIN_RECORD_SIZE or pos + size > limit:
                    self.scan_end = mf.file_from + pos
                    return
                body_len = unpack_i32(mm, pos + 84)[0]
                body_end = pos + BODY_POS + body_len
                if body_len < 0 or body_end + 4 > pos + size:
                    self.scan_end = mf.file_from + pos
                    return
                topic_len = unpack_u16(mm, body_end)[0]
                props_at = body_end + 2 + topic_len
                if props_at + 2 > pos + size or props_at + 2 + unpack_u16(mm, props_at)[0] != pos + size:
                    self.scan_end = mf.file_from + pos
                    return
                if check_crc and crc32(view[pos + BODY_POS : body_end]) != unpack_u32(mm, pos + 8)[0]:
                    self.scan_end = mf.file_from + pos
                    return
                yield mf, pos, size
                pos += size
                self.scan_end = mf.file_from + pos
            idx += 1
            if idx >= len(files):
                self.scan_end = mf.file_from + min(pos, mf.size)
                return
            if pos < mf.size:
                # Unused space too small for a marker: the file ended here.
                pass
            mf = files[idx]
            pos = 0
            self.scan_end = mf.file_from

    def flush(self) -> int:
        return self.mfq.flush()

    def close(self) -> None:
        self.mfq.close()

    scan_end: int = 0
