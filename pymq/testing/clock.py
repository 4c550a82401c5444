"""A clock that moves only when a test says so (implements :class:`pymq.clock.Clock`).

    clock = FakeClock()
    locks = QueueLockManager(60, clock)
    clock.advance(61)          # every lock is now expired, no sleeping

``sleep`` suspends, and a ``call_later`` timer waits, until :meth:`advance` moves the clock
past its deadline, so periodic tasks and timeouts built on the clock run exactly when the
test advances time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

__all__ = ["FakeClock"]


class _Timer:
    """A ``call_later`` callback waiting in the clock's heap."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def done(self) -> bool:
        return self.cancelled

    def fire(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.callback()


class FakeClock:
    """Monotonic seconds start at ``start``; wall-clock milliseconds at ``wall_ms``."""

    def __init__(self, start: float = 1000.0, wall_ms: int = 1_700_000_000_000) -> None:
        self.now = start
        self._origin = start
        self._wall_ms = wall_ms
        #: (deadline, tie-breaker, a sleeper's future or a call_later timer)
        self._sleepers: list[tuple[float, int, asyncio.Future[None] | _Timer]] = []
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

    def call_later(self, seconds: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(callback)
        heapq.heappush(self._sleepers, (self.now + max(seconds, 0.0), next(self._seq), timer))
        return timer

    @property
    def sleepers(self) -> int:
        """How many ``sleep`` calls and ``call_later`` timers are waiting (cancelled ones excluded)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError("a monotonic clock does not go back")
        self.now += seconds
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, waiter = heapq.heappop(self._sleepers)
            if isinstance(waiter, _Timer):
                waiter.fire()
            elif not waiter.done():
                waiter.set_result(None)

    async def run_for(self, seconds: float, *, yields: int = 5) -> None:
        """:meth:`advance`, then let the woken tasks run (a few loop iterations, no real waiting)."""
        self.advance(seconds)
        for _ in range(yields):
            await asyncio.sleep(0)
