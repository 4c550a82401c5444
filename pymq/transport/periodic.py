"""Running something every N seconds, forever, without one failure stopping it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from pymq.logs import get_logger

log = get_logger("periodic")


async def every(interval: float, fn: Callable[[], Any], *, name: str | None = None) -> None:
    """Call ``fn`` (a function or a coroutine function) every ``interval`` seconds until cancelled.

    Exceptions are logged and the schedule goes on; cancellation stops it.
    """
    while True:
        await asyncio.sleep(interval)
        try:
            result = fn()
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("periodic_task_failed", task=name or getattr(fn, "__name__", "?"))
