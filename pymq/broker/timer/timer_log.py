"""TimerLog: an append-only log of fixed-size timer units in memory-mapped segment files.

One unit per pending timer message (RocketMQ 5's TimerLog, simplified)::

    0   i64  prev_pos    position of the previous unit of the same wheel slot (-1: none)
    8   i64  slot_ms     the wheel slot the unit was filed under
    16  i64  deliver_ms  when the message is due
    24  i64  phys        commitlog offset of the message (in the timer topic)
    32  i32  size        its size in bytes
    36  i32  flags       MAGIC | flag bits (a unit without MAGIC is the end of the data)

Big-endian. Positions are global byte offsets: segment k holds ``[k*file_size, (k+1)*file_size)``
and is named by its start, 20 digits. The units of one wheel slot form a chain from the
slot's last unit backwards through ``prev_pos``, so firing a slot reads only its own units.
A segment is deleted once every slot it holds has fired (:meth:`delete_before`).
No sockets, no asyncio: tested on its own.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

UNIT = struct.Struct(">qqqqii")
UNIT_SIZE = UNIT.size  # 40
MAGIC = 0x54490000
MAGIC_MASK = 0x7FFF0000
#: the unit is a merged-delay message's (see pymq.broker.timer.merge)
FLAG_MERGE = 0x1


def allocate(path: Path, size: int) -> None:
    """Create ``path`` with ``size`` bytes really allocated: a full disk fails here (OSError),
    never as SIGBUS on a write through the mapping."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


class TimerUnit(NamedTuple):
    pos: int
    prev_pos: int
    slot_ms: int
    deliver_ms: int
    phys: int
    size: int
    flags: int


class TimerLog:
    """Segments of ``file_size`` bytes (a multiple of :data:`UNIT_SIZE`) under ``directory``."""

    def __init__(self, directory: Path, file_size: int) -> None:
        if file_size % UNIT_SIZE or file_size <= 0:
            raise ValueError(f"timer log file size must be a positive multiple of {UNIT_SIZE}")
        self.directory = directory
        self.file_size = file_size
        #: segment start -> mapping
        self._maps: dict[int, mmap.mmap] = {}
        #: the next append position
        self.write_pos = 0

    # --- files -------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Map the existing segments (the write position is set by :meth:`recover`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.directory.iterdir()):
            if path.name.isdigit() and path.stat().st_size == self.file_size:
                self._maps[int(path.name)] = self._map(path)

    def _map(self, path: Path) -> mmap.mmap:
        fd = os.open(path, os.O_RDWR)
        try:
            return mmap.mmap(fd, self.file_size)
        finally:
            os.close(fd)

    def _segment(self, pos: int, *, create: bool) -> mmap.mmap | None:
        start = pos - pos % self.file_size
        mm = self._maps.get(start)
        if mm is None and create:
            path = self.directory / f"{start:020d}"
            tmp = path.with_suffix(".creating")
            allocate(tmp, self.file_size)
            os.replace(tmp, path)
            mm = self._maps[start] = self._map(path)
        return mm

    @property
    def min_pos(self) -> int:
        return min(self._maps) if self._maps else self.write_pos

    def segment_starts(self) -> list[int]:
        return sorted(self._maps)

    # --- units -------------------------------------------------------------------------------------------

    def append(self, prev_pos: int, slot_ms: int, deliver_ms: int, phys: int, size: int, flags: int = 0) -> int:
        """Write one unit at the end; its position."""
        pos = self.write_pos
        mm = self._segment(pos, create=True)
        assert mm is not None
        UNIT.pack_into(mm, pos % self.file_size, prev_pos, slot_ms, deliver_ms, phys, size, MAGIC | flags)
        self.write_pos = pos + UNIT_SIZE
        return pos

    def read(self, pos: int) -> TimerUnit | None:
        """The unit at ``pos``, or None (deleted segment, no unit written there)."""
        if pos % UNIT_SIZE:  # units start at multiples of UNIT_SIZE (a corrupt prev_pos may point anywhere)
            return None
        mm = self._segment(pos, create=False)
        if mm is None:
            return None
        prev, slot, deliver, phys, size, flags = UNIT.unpack_from(mm, pos % self.file_size)
        if flags & MAGIC_MASK != MAGIC:
            return None
        return TimerUnit(pos, prev, slot, deliver, phys, size, flags & ~MAGIC_MASK)

    def chain(self, last_pos: int, slot_ms: int) -> list[TimerUnit]:
        """The units of slot ``slot_ms`` ending at ``last_pos``, oldest first."""
        out: list[TimerUnit] = []
        pos = last_pos
        while pos >= 0:
            u = self.read(pos)
            if u is None or u.slot_ms != slot_ms:
                break
            out.append(u)
            if u.prev_pos >= pos:  # the previous unit was appended before: a corrupt link must not loop
                break
            pos = u.prev_pos
        out.reverse()
        return out

    def scan(self, start: int) -> Iterator[TimerUnit]:
        """Units written from ``start`` on, in order, up to the first position holding none."""
        pos = start
        while True:
            u = self.read(pos)
            if u is None:
                return
            yield u
            pos += UNIT_SIZE

    def truncate(self, pos: int) -> None:
        """Forget everything from ``pos`` on (zeroed, so a later scan stops there)."""
        end = pos
        for u in self.scan(pos):
            end = u.pos + UNIT_SIZE
        p = pos
        while p < end:
            mm = self._segment(p, create=False)
            if mm is None:
                break
            off = p % self.file_size
            n = min(end - p, self.file_size - off)
            mm[off : off + n] = bytes(n)
            p += n
        for start in [s for s in self._maps if s > pos - pos % self.file_size]:
            self._maps.pop(start).close()
            (self.directory / f"{start:020d}").unlink(missing_ok=True)
        self.write_pos = pos

    def delete_before(self, pos: int) -> int:
        """Delete whole segments that end at or before ``pos`` (never the one being written); how many."""
        n = 0
        for start in sorted(self._maps):
            if start + self.file_size > min(pos, self.write_pos - self.write_pos % self.file_size):
                break
            self._maps.pop(start).close()
            (self.directory / f"{start:020d}").unlink(missing_ok=True)
            n += 1
        return n

    def flush(self) -> None:
        for mm in list(self._maps.values()):
            mm.flush()

    def close(self) -> None:
        for mm in self._maps.values():
            mm.close()
        self._maps.clear()


__all__ = ["FLAG_MERGE", "UNIT_SIZE", "TimerLog", "TimerUnit"]
