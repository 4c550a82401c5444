"""Event loop choice, kept in one place: uvloop when it is installed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on supported platforms
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(main: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """``asyncio.run`` on uvloop when available."""
    factory = new_event_loop if use_uvloop else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
