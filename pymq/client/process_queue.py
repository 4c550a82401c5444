"""Messages pulled from one queue and not yet consumed.

The commit offset of a queue is the smallest offset still in flight, or one past the
largest pulled offset when nothing is: a slow message holds back the committed offset, so
a crash re-delivers rather than loses it (at least once).
"""

from __future__ import annotations

from collections import deque

from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.protocol.message import MessageExt


class ProcessQueue:
    __slots__ = (
        "_clock",
        "_in_flight",
        "_order",
        "consuming",
        "dropped",
        "last_consume_time",
        "last_lock_time",
        "last_pull_time",
        "locked",
        "max_offset",
        "size",
    )

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._in_flight: dict[int, MessageExt] = {}
        # offsets in pull order (increasing); entries already consumed are skipped lazily
        self._order: deque[int] = deque()
        self.size = 0
        self.max_offset = -1
        self.dropped = False
        self.locked = False
        self.consuming = False
        self.last_pull_time = self.last_consume_time = clock.monotonic()
        self.last_lock_time = 0.0

    @property
    def count(self) -> int:
        return len(self._in_flight)

    def add(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            off = m.queue_offset
            if off in self._in_flight:
                continue
            self._in_flight[off] = m
            self._order.append(off)
            self.size += m.body_size
            if off > self.max_offset:
                self.max_offset = off

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit now."""
        for m in msgs:
            if self._in_flight.pop(m.queue_offset, None) is not None:
                self.size -= m.body_size
        self.last_consume_time = self._clock.monotonic()
        return self.commit_offset()

    def commit_offset(self) -> int:
        order = self._order
        in_flight = self._in_flight
        while order and order[0] not in in_flight:
            order.popleft()
        if order:
            return order[0]
        return self.max_offset + 1

    @property
    def min_offset(self) -> int:
        return self.commit_offset() if self._in_flight else -1

    @property
    def span(self) -> int:
        """Largest minus smallest offset in flight (flow control for concurrent consumers)."""
        if not self._in_flight:
            return 0
        return self.max_offset - self.commit_offset()

    def take_in_order(self, n: int) -> list[MessageExt]:
        """The ``n`` lowest in-flight messages, in offset order (orderly consumption)."""
        out: list[MessageExt] = []
        for off in sorted(self._in_flight)[:n]:
            out.append(self._in_flight[off])
        return out

    def messages(self) -> list[MessageExt]:
        return [self._in_flight[o] for o in sorted(self._in_flight)]

    def clear(self) -> None:
        self._in_flight.clear()
        self._order.clear()
        self.size = 0
