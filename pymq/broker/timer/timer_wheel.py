"""TimerWheel: one memory-mapped file of time slots, a ring over ``slots x precision_ms``.

Slot ``i`` describes the wheel time ``slot_ms`` with ``(slot_ms // precision) % slots == i``::

    0   i64  slot_ms    the time the slot stands for (another value: the slot is empty this round)
    8   i64  first_pos  its first unit in the TimerLog
    16  i64  last_pos   its last unit (the chain goes backwards from here)
    24  i32  num        how many units
    28  i32  reserved

Big-endian, 32 bytes a slot (RocketMQ 5's TimerWheel layout, without its magic). The ring
must span more than the longest delay plus how far delivery may lag behind the clock
(the service keeps ``slots x precision`` at twice the maximum delay and holds enqueueing
while it lags by more than the maximum delay), so a slot is never reused while it holds
undelivered units. No sockets, no asyncio.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

from pymq.broker.timer.timer_log import allocate

SLOT = struct.Struct(">qqqii")
SLOT_SIZE = SLOT.size  # 32


class Slot(NamedTuple):
    slot_ms: int
    first_pos: int
    last_pos: int
    num: int


EMPTY = Slot(-1, -1, -1, 0)


class TimerWheel:
    def __init__(self, path: Path, slots: int, precision_ms: int) -> None:
        self.path = path
        self.precision_ms = precision_ms
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size >= SLOT_SIZE:
            # The wheel keeps the size it was created with (its slots index the ring).
            slots = path.stat().st_size // SLOT_SIZE
        self.slots = slots
        if not path.exists() or path.stat().st_size < slots * SLOT_SIZE:
            tmp = path.with_suffix(".creating")
            allocate(tmp, slots * SLOT_SIZE)  # zeroed: every slot empty
            os.replace(tmp, path)
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, slots * SLOT_SIZE)
        finally:
            os.close(fd)

    @property
    def span_ms(self) -> int:
        return self.slots * self.precision_ms

    def slot_of(self, time_ms: int) -> int:
        """The slot time ``time_ms`` falls in (rounded down to the precision)."""
        return time_ms - time_ms % self.precision_ms

    def _at(self, slot_ms: int) -> int:
        return (slot_ms // self.precision_ms) % self.slots * SLOT_SIZE

    def get(self, slot_ms: int) -> Slot:
        at, first, last, num, _ = SLOT.unpack_from(self.mm, self._at(slot_ms))
        return Slot(at, first, last, num) if at == slot_ms and num > 0 else EMPTY

    def put(self, slot_ms: int, first_pos: int, last_pos: int, num: int) -> None:
        SLOT.pack_into(self.mm, self._at(slot_ms), slot_ms, first_pos, last_pos, num, 0)

    def clear(self, slot_ms: int) -> None:
        SLOT.pack_into(self.mm, self._at(slot_ms), -1, -1, -1, 0, 0)

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        self.mm.close()


__all__ = ["EMPTY", "SLOT_SIZE", "Slot", "TimerWheel"]
