"""Background services: one small start/stop interface for everything the broker runs beside requests.

The schedule service, the nameserver registrar, the periodic scans and replication are all
:class:`Service` objects; the broker starts them in order and stops them in reverse.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from pymq.tasks import cancel_and_wait
from pymq.transport.periodic import every


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class PeriodicService:
    """Calls ``fn`` every ``interval`` seconds (first call one interval after start); failures are logged."""

    def __init__(self, name: str, interval: float, fn: Callable[[], Any]) -> None:
        self.name = name
        self.interval = interval
        self.fn = fn
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.ensure_future(every(self.interval, self.fn, name=self.name))
        self._task.set_name(f"broker-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
