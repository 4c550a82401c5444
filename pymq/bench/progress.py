"""Live progress while a benchmark runs: rich when installed, a plain line otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable

from pymq.bench.stats import Recorder
from pymq.tasks import wait_within


@contextlib.asynccontextmanager
async def live(recorders: Callable[[], list[Recorder]], label: str, enabled: bool = True) -> AsyncIterator[None]:
    """Show msgs/s, MB/s and errors every half second on stderr until the block ends."""
    if not enabled:
        yield
        return
    stop = asyncio.Event()

    def line() -> str:
        rs = recorders()
        msgs = sum(r.messages for r in rs)
        errs = sum(r.errors for r in rs)
        secs = max(1e-9, max((r.elapsed for r in rs), default=0.0))
        size = rs[0].body_size if rs else 0
        rate = msgs / secs
        return f"{label}: {msgs:>10,d} msgs  {rate:>10,.0f} msgs/s  {rate * size / 1e6:>8.1f} MB/s  errors {errs}"

    async def plain() -> None:
        last = 0.0
        while not stop.is_set():
            if time.monotonic() - last >= 1.0:
                print(line(), file=sys.stderr, flush=True)
                last = time.monotonic()
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await wait_within(stop.wait(), 0.5)

    async def fancy() -> None:
        from rich.console import Console
        from rich.live import Live

        with Live(line(), console=Console(stderr=True), refresh_per_second=4, transient=True) as view:
            while not stop.is_set():
                view.update(line())
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await wait_within(stop.wait(), 0.25)

    try:
        import rich  # noqa: F401

        use_rich = sys.stderr.isatty()
    except ImportError:
        use_rich = False
    task = asyncio.ensure_future(fancy() if use_rich else plain())
    try:
        yield
    finally:
        stop.set()
        await task
