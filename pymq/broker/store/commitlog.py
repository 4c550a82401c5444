"""The commitlog: every record of every topic, appended to one sequence of mapped files.

Files are ``commitlog/<20-digit start offset>``, each ``commitlog_file_size`` bytes (1 GiB by
default); a record's commitlog (physical) offset is the file's start plus its position in it.
Records use the layout in :mod:`pymq.protocol.record`. A record never spans two files: when
the next record plus an 8-byte blank marker does not fit in the current file, the rest of
the file gets the blank marker ``[i32 bytes left in the file][u32 0xCBD43194]``
(:func:`pymq.protocol.record.blank_marker`) and writing continues at the start of the next
file. Past the last record of the newest file the bytes are zero.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from pymq.broker.store.mapped_file import MappedFile, MappedFileQueue
from pymq.protocol.record import (
    BLANK_MAGIC,
    BODY_POS,
    HEAD,
    MAGIC,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_POS,
    blank_marker,
)

BLANK_MIN = 8
_U16 = struct.Struct(">H")
_Q = struct.Struct(">q")
#: total_size, magic, body_crc, (skipped to byte 84), body_len
_HDR = struct.Struct(">iII72xi")
#: physical_offset, store_timestamp (bytes 60..76)
_PHYS_TS = struct.Struct(">qq")


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
        """The whole record at ``phys``, or None if no record starts there.

        The record's own physical-offset field must equal ``phys``, so an offset pointing
        into the middle of a record (a forged or stale message id) finds nothing.
        """
        mf = self.mfq.find(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from
        if pos < 0 or pos + MIN_RECORD_SIZE > mf.wrote_pos:
            return None
        size, magic = HEAD.unpack_from(mf.mm, pos)
        if magic != MAGIC or size < MIN_RECORD_SIZE or pos + size > mf.wrote_pos:
            return None
        if _Q.unpack_from(mf.mm, pos + PHYSICAL_OFFSET_POS)[0] != phys:
            return None
        return memoryview(mf.mm)[pos : pos + size]

    def scan(self, start: int, check_crc: bool) -> Iterator[tuple[MappedFile, int, int, int, int, int]]:
        """Yield ``(file, pos, size, body_end, props_at, store_ts)`` per valid record from ``start``.

        ``start`` is a record boundary; ``body_end`` is where the topic length field sits and
        ``props_at`` where the properties length field sits (positions in the file).

        A record is valid when its magic, size and inner lengths agree, its body CRC
        matches (if ``check_crc``), and the broker-assigned block was written: the
        physical-offset field equals the record's position and the store time is set.
        The appender copies a producer's bytes first and patches that block after, so a
        crash in between leaves a record whose body checks out but whose block does not.
        Stops at the first invalid record; the caller reads :attr:`scan_end` afterwards.
        Blank markers move to the next file.
        """
        self.scan_end = start
        mf = self.mfq.find(start)
        if mf is None:
            return
        files = self.mfq.files
        idx = files.index(mf)
        pos = start - mf.file_from
        unpack_hdr = _HDR.unpack_from
        unpack_u16 = _U16.unpack_from
        unpack_block = _PHYS_TS.unpack_from
        crc32 = zlib.crc32
        while True:
            mm = mf.mm
            limit = mf.size
            base = mf.file_from
            view = memoryview(mm)
            valid = True
            while pos + BLANK_MIN <= limit:
                if pos + MIN_RECORD_SIZE > limit:
                    # Too little room for a record: only a blank marker can be here.
                    valid = HEAD.unpack_from(mm, pos)[1] == BLANK_MAGIC
                    break
                size, magic, crc, body_len = unpack_hdr(mm, pos)
                if magic != MAGIC:
                    valid = magic == BLANK_MAGIC
                    break
                end = pos + size
                body_end = pos + BODY_POS + body_len
                if size < MIN_RECORD_SIZE or end > limit or body_len < 0 or body_end + 4 > end:
                    valid = False
                    break
                props_at = body_end + 2 + unpack_u16(mm, body_end)[0]
                if props_at + 2 > end or props_at + 2 + unpack_u16(mm, props_at)[0] != end:
                    valid = False
                    break
                phys, store_ts = unpack_block(mm, pos + PHYSICAL_OFFSET_POS)
                if phys != base + pos or store_ts <= 0:
                    valid = False
                    break
                if check_crc and crc32(view[pos + BODY_POS : body_end]) != crc:
                    valid = False
                    break
                yield mf, pos, size, body_end, props_at, store_ts
                pos = end
                self.scan_end = base + pos
            view.release()
            if not valid:
                self.scan_end = base + pos
                return
            # A blank marker, or the exact end of the file: the data goes on in the next file.
            idx += 1
            if idx >= len(files):
                self.scan_end = base + limit
                return
            mf = files[idx]
            pos = 0
            self.scan_end = mf.file_from

    def flush(self) -> int:
        return self.mfq.flush()

    def close(self) -> None:
        self.mfq.close()

    scan_end: int = 0
