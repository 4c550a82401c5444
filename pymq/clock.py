"""The clock seam: where timers matter, code asks an injected :class:`Clock` instead of ``time``.

Both the client and the broker may import this module (it imports nothing of ours), so a test
can drive lock expiry, rebalance and process-queue timeouts with the test kit's ``FakeClock``
instead of sleeping. The real clock is the default everywhere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "TimerHandle"]


class TimerHandle(Protocol):
    """What :meth:`Clock.call_later` returns: a timer that can be cancelled."""

    def cancel(self) -> None: ...


@runtime_checkable
class Clock(Protocol):
    """Monotonic seconds for durations, wall-clock milliseconds for timestamps, and sleeping."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        ...

    def time_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` once ``seconds`` of this clock's time have passed (on the running loop)."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time`` and ``asyncio.sleep``."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def time_ms(self) -> int:
        return int(time.time() * 1000)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(seconds, callback)


#: the default clock of every component that takes one
SYSTEM_CLOCK: Clock = SystemClock()
