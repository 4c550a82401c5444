"""Shared fixtures: quiet logs, an in-process cluster, daemon processes that are always stopped."""

from __future__ import annotations

import asyncio
import gc
import io
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest

from pymq.logs import configure_logging
from pymq.testing import DaemonProcess, FakeClock, LocalCluster
from tests.master_slave import record_pull_addrs

configure_logging(os.environ.get("PYMQ_TEST_LOG_LEVEL", "warning"), json=False)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    """One nameserver and one broker, in-process, on ephemeral ports."""
    async with LocalCluster(tmp_path / "cluster", brokers=1) as c:
        yield c


@pytest.fixture
async def cluster2(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    """One nameserver and two brokers, in-process, on ephemeral ports."""
    async with LocalCluster(tmp_path / "cluster", brokers=2) as c:
        yield c


@pytest.fixture
def clock() -> FakeClock:
    """A clock for the brokers (``LocalCluster(clock=...)``): pop times, invisible times and transaction
    timeouts. It reads the real wall time at first, then moves only when the test advances it."""
    return FakeClock(wall_ms=int(time.time() * 1000))


@pytest.fixture
def pulled_from(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The broker address of every pull answer the consumers get, in order."""
    return record_pull_addrs(monkeypatch)


@pytest.fixture
def processes() -> Iterator[list[DaemonProcess]]:
    """Daemons a test starts go in this list; every one is stopped (by PID) afterwards."""
    procs: list[DaemonProcess] = []
    yield procs
    for p in reversed(procs):
        p.stop()


@pytest.fixture
def free_ports():
    """A function returning n currently free TCP ports on 127.0.0.1."""
    import socket

    def take(n: int) -> list[int]:
        socks = [socket.socket() for _ in range(n)]
        try:
            for s in socks:
                s.bind(("127.0.0.1", 0))
            return [s.getsockname()[1] for s in socks]
        finally:
            for s in socks:
                s.close()

    return take


# --- the record accelerator (issue 19) -----------------------------------------------------------------------


@pytest.fixture(params=["speedups", "pure-python"])
def record_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test twice: with pymq._speedups (when built and not switched off) and with the Python bodies."""
    if request.param == "pure-python":
        from pymq.protocol import record

        monkeypatch.setattr(record, "speedups", None)
    return str(request.param)


# --- a hung test says where its coroutines wait -----------------------------------------------------------

#: seconds into a test before its pending asyncio tasks' stacks are written to stderr (pytest-timeout,
#: 300 s, then shows only the threads: the event loop's thread is just in select())
HANG_DUMP_AFTER = float(os.environ.get("PYMQ_TEST_HANG_DUMP_SECONDS", "240"))


def dump_pending_tasks() -> None:
    """Every pending asyncio task's stack, found through the garbage collector (from a watchdog thread)."""
    out = io.StringIO()
    tasks = [o for o in gc.get_objects() if isinstance(o, asyncio.Task) and not o.done()]
    out.write(f"\n=== {len(tasks)} pending asyncio tasks after {HANG_DUMP_AFTER:.0f}s ===\n")
    for task in tasks:
        try:
            task.print_stack(limit=25, file=out)
        except Exception as exc:  # (the loop's thread may change the task meanwhile)
            out.write(f"{task!r}: {exc}\n")
    sys.stderr.write(out.getvalue())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    watchdog = threading.Timer(HANG_DUMP_AFTER, dump_pending_tasks)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
