"""The checkpoint file: where flushed data ends, by store time.

One 4 KiB file, big-endian integers::

    0   i64  physic_ts     store time of the last flushed commitlog record
    8   i64  logics_ts     store time of the last flushed consume-queue entry's record
    16  i64  index_ts      store time of the last flushed index entry's record
    24  i64  flushed_phys  commitlog offset known flushed
    32  i64  clean_end     commitlog end at a clean shutdown (-1 while running)

Written with ``pwrite`` + ``fdatasync`` by the logics flush (every second) and at shutdown;
``physic_ts``/``flushed_phys`` are updated in memory after every commitlog sync and so reach
disk with the next write. Recovery after a crash re-dispatches from a point before
``min(physic_ts, logics_ts)``; a clean shutdown leaves ``clean_end >= 0``.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

_LAYOUT = struct.Struct(">qqqqq")
FILE_SIZE = 4096


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_ts = 0
        self.logics_ts = 0
        self.index_ts = 0
        self.flushed_phys = 0
        self.clean_end = -1
        exists = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if exists and os.fstat(self._fd).st_size >= _LAYOUT.size:
            raw = os.pread(self._fd, _LAYOUT.size, 0)
            (self.physic_ts, self.logics_ts, self.index_ts, self.flushed_phys, self.clean_end) = _LAYOUT.unpack(raw)
        else:
            os.ftruncate(self._fd, FILE_SIZE)

    @property
    def min_ts(self) -> int:
        return min(self.physic_ts, self.logics_ts)

    def flush(self) -> None:
        data = _LAYOUT.pack(self.physic_ts, self.logics_ts, self.index_ts, self.flushed_phys, self.clean_end)
        os.pwrite(self._fd, data, 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
