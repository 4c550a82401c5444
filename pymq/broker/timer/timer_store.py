"""The timer files together: TimerLog units chained per TimerWheel slot, and crash recovery.

:meth:`TimerFiles.add` appends a unit and links it into its slot; :meth:`TimerFiles.units`
reads one slot's units. Both files are written through mappings, so a killed process
loses nothing it wrote (the page cache keeps it); the service flushes them before each
checkpoint, so after an OS crash they are at least as new as the checkpoint.

:meth:`TimerFiles.recover` makes the files agree with a checkpoint: units written after
the checkpoint's TimerLog position are unlinked from their slots and erased, because the
enqueuer re-reads their messages from the checkpoint's queue offsets (each message gets
exactly one unit). No sockets, no asyncio.
"""

from __future__ import annotations

from pathlib import Path

from pymq.broker.timer.timer_log import UNIT_SIZE, TimerLog, TimerUnit
from pymq.broker.timer.timer_wheel import TimerWheel

#: TimerLog segment size: 1,000,000 units (40 MB)
DEFAULT_LOG_FILE_SIZE = 1_000_000 * UNIT_SIZE


class TimerFiles:
    def __init__(self, root: Path, slots: int, precision_ms: int, log_file_size: int = DEFAULT_LOG_FILE_SIZE) -> None:
        self.log = TimerLog(root / "timerlog", log_file_size)
        self.wheel = TimerWheel(root / "timerwheel", slots, precision_ms)
        #: segment start -> the latest slot among its units (segments go once their slots fired)
        self.segment_max_slot: dict[int, int] = {}

    def load(self, checkpoint_pos: int, segment_max_slot: dict[int, int]) -> int:
        """Map the files and undo what followed the checkpoint; how many units were undone."""
        self.log.load()
        self.segment_max_slot = {s: m for s, m in segment_max_slot.items() if s < checkpoint_pos}
        return self.recover(checkpoint_pos)

    def recover(self, checkpoint_pos: int) -> int:
        undone = list(self.log.scan(checkpoint_pos))
        wheel = self.wheel
        for slot_ms in {u.slot_ms for u in undone}:
            s = wheel.get(slot_ms)
            if s.num == 0:
                continue
            pos, num = s.last_pos, s.num
            while pos >= checkpoint_pos:
                u = self.log.read(pos)
                if u is None or u.slot_ms != slot_ms:
                    pos = -1
                    break
                pos, num = u.prev_pos, num - 1
            if pos < 0 or num <= 0:
                wheel.clear(slot_ms)
            else:
                wheel.put(slot_ms, s.first_pos, pos, num)
        self.log.truncate(checkpoint_pos)
        return len(undone)

    def add(self, slot_ms: int, deliver_ms: int, phys: int, size: int, flags: int = 0) -> int:
        """File one timer under ``slot_ms``; its TimerLog position."""
        wheel = self.wheel
        s = wheel.get(slot_ms)
        pos = self.log.append(s.last_pos if s.num else -1, slot_ms, deliver_ms, phys, size, flags)
        wheel.put(slot_ms, s.first_pos if s.num else pos, pos, s.num + 1)
        seg = pos - pos % self.log.file_size
        if self.segment_max_slot.get(seg, -1) < slot_ms:
            self.segment_max_slot[seg] = slot_ms
        return pos

    def units(self, slot_ms: int) -> list[TimerUnit]:
        """The units filed under ``slot_ms``, in the order they were filed."""
        s = self.wheel.get(slot_ms)
        if s.num == 0:
            return []
        return self.log.chain(s.last_pos, slot_ms)

    def release(self, fired_before_ms: int) -> int:
        """Delete leading TimerLog segments whose slots all lie before ``fired_before_ms``."""
        keep_from = self.log.write_pos
        for seg in self.log.segment_starts():
            if self.segment_max_slot.get(seg, fired_before_ms) >= fired_before_ms:
                keep_from = seg
                break
        n = self.log.delete_before(keep_from)
        for seg in [s for s in self.segment_max_slot if s + self.log.file_size <= keep_from]:
            if seg not in self.log.segment_starts():
                del self.segment_max_slot[seg]
        return n

    def flush(self) -> None:
        self.log.flush()
        self.wheel.flush()

    def close(self) -> None:
        self.log.close()
        self.wheel.close()


__all__ = ["DEFAULT_LOG_FILE_SIZE", "TimerFiles"]
