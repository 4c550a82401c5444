"""The services only a master runs, started and stopped as one group.

A slave must not put anything (its commitlog is a byte copy of its master's) and a master
must run everything that delivers or re-puts on its own: delay levels (schedule), timer
messages, the refill of priority topics, transaction check-back and pop revival. Which of
them run follows the broker's *current* role: the app starts the group after the startup
fence check if it is a master, :class:`~pymq.broker.role.change.RoleChanger` starts it
at a promotion and stops it at a fence or demotion, and ``close`` stops it.

:class:`MasterServices` is idempotent (a second start or stop does nothing) and keeps its
order: start in list order, stop in reverse. A member that fails to start stops the
members started before it, and the error goes to the caller. :class:`Step` turns a pair of
callables into a member (state that lives only while the broker is master: pop state,
the priority interceptor, the transaction check service).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pymq.broker.service import Service
from pymq.logs import get_logger

log = get_logger("broker.master_services")


class Step:
    """A member made of two callables (``stop`` may be None)."""

    def __init__(
        self, name: str, start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.name = name
        self._start = start
        self._stop = stop

    async def start(self) -> None:
        await self._start()

    async def stop(self) -> None:
        if self._stop is not None:
            await self._stop()


class MasterServices:
    def __init__(self, members: list[Service] | None = None) -> None:
        self.members: list[Service] = list(members or [])
        self.running = False
        self._started: list[Service] = []

    def add(self, member: Service) -> None:
        """Append a member (while stopped: the group's order is fixed while it runs)."""
        if self.running:
            raise RuntimeError("add master services while the group is stopped")
        self.members.append(member)

    async def start(self) -> None:
        """Start every member in order (nothing if already running)."""
        if self.running:
            return
        self.running = True
        for m in self.members:
            try:
                await m.start()
            except BaseException:
                log.exception("master_service_start_failed", member=_name(m))
                await self.stop()
                raise
            self._started.append(m)

    async def stop(self) -> None:
        """Stop the started members in reverse order (nothing if stopped); a failing stop is logged."""
        if not self.running:
            return
        self.running = False
        while self._started:
            m = self._started.pop()
            try:
                await m.stop()
            except Exception:
                log.exception("master_service_stop_failed", member=_name(m))


def _name(m: Service) -> str:
    return str(getattr(m, "name", type(m).__name__))


__all__ = ["MasterServices", "Step"]
