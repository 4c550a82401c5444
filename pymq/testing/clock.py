"""A clock that moves only when a test says so (implements :class:`pymq.clock.Clock`).

    clock = FakeClock()
    locks = QueueLockManager(60, clock)
    clock.advance(61)          # every lock is now expired, no sleeping

``sleep`` suspends until :meth:`advance` moves the clock past the sleeper's deadline, so
periodic tasks built on ``clock.sleep`` run exactly when the test advances time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

__all__ = ["FakeClock"]


class FakeClock:
    """Monotonic seconds start at ``start``; wall-clock milliseconds at ``wall_ms``."""

    def __init__(self, start: float = 1000.0, wall_ms: int = 1_700_000_000_000) -> None:
        self.now = start
        self._origin = start
        self._wall_ms = wall_ms
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def time_ms(self) -> int:
        return self._wall_ms + int((self.now - self._origin) * 1000)

    def __call__(self) -> float:
        """Monotonic seconds, so the clock also fits APIs that take a ``() -> float``."""
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many ``sleep`` calls are waiting (cancelled ones excluded)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError("a monotonic clock does not go back")
        self.now += seconds
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    async def run_for(self, seconds: float, *, yields: int = 5) -> None:
        """:meth:`advance`, then let the woken tasks run (a few loop iterations, no real waiting)."""
        self.advance(seconds)
        for _ in range(yields):
            await asyncio.sleep(0)
