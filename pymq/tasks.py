"""Stopping background asyncio tasks: the cancel-then-wait every service's ``stop`` needs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


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


async def wait_within(aw: Awaitable[T], timeout: float | None) -> T:
    """``await aw`` for at most ``timeout`` seconds (TimeoutError after); None: no limit.

    Use it instead of ``asyncio.wait_for``: on Python 3.11, ``wait_for`` runs ``aw`` in a task of
    its own, and a cancellation that arrives just as that task finishes is swallowed (``wait_for``
    returns the result). A loop stopped by ``task.cancel()`` then goes on, and whoever awaits it
    waits for ever (an HA stream's ``drain`` did this to a broker's shutdown, about 1 run in 20).
    ``asyncio.timeout`` awaits in the caller's task, so a cancellation always arrives.
    """
    async with asyncio.timeout(timeout):
        return await aw
