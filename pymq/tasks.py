"""Stopping background asyncio tasks: the cancel-then-wait every service's ``stop`` needs."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has stopped; its CancelledError is not passed on."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel every task, wait for them all (their CancelledError or failure is not passed on), empty the list."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
    tasks.clear()
