"""Heartbeat bookkeeping on an injected clock: a broker is alive while its last heartbeat is
younger than the timeout. Pure (the clock is any ``() -> float`` of monotonic seconds)."""

from __future__ import annotations

from collections.abc import Callable


class Heartbeats:
    """Last heartbeat time per broker address."""

    def __init__(self, clock: Callable[[], float], timeout: float) -> None:
        self.clock = clock
        self.timeout = timeout
        self.last: dict[str, float] = {}

    def beat(self, address: str) -> None:
        self.last[address] = self.clock()

    def alive(self, address: str) -> bool:
        at = self.last.get(address)
        return at is not None and self.clock() - at < self.timeout

    def alive_set(self) -> set[str]:
        now = self.clock()
        return {a for a, at in self.last.items() if now - at < self.timeout}

    def forget(self, address: str) -> None:
        self.last.pop(address, None)


__all__ = ["Heartbeats"]
