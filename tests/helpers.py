"""Small helpers shared by tests: polling with a deadline instead of sleeping, admin runs, reading a topic,
threads whose errors are seen."""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pymq.client import ConsumeFromWhere, MessageQueue, PullConsumer

if TYPE_CHECKING:
    from pymq.protocol.message import MessageExt
    from pymq.testing import LocalCluster


async def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> None:
    """Poll ``predicate`` until it is true; fail the test with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(interval)


def wait_until_sync(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


async def wait_until_async(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, interval: float = 0.05, what: str = ""
) -> None:
    """:func:`wait_until` for a check that must be awaited (a request to a broker or nameserver)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(interval)


class CheckedThread(threading.Thread):
    """A thread whose outcome the test reads: :meth:`result` re-raises what ``target`` raised.

    A plain thread's exception only reaches the thread excepthook (a warning at most), so a
    test that joins it passes whatever the thread did.
    """

    def __init__(self, target: Callable[..., Any], *args: Any, name: str | None = None) -> None:
        super().__init__(name=name, daemon=True)  # (daemon: a hung one cannot hang the test run's exit)
        self._call = (target, args)
        self._value: Any = None
        self._error: BaseException | None = None

    def run(self) -> None:
        target, args = self._call
        try:
            self._value = target(*args)
        except BaseException as exc:
            self._error = exc

    def result(self, timeout: float = 10.0) -> Any:
        """``target``'s return value once it ended; its exception re-raised; AssertionError if still running."""
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"thread {self.name} still running after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._value


async def run_admin(namesrv: str, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    """``pymq-admin --namesrv NAMESRV ARGS...`` in a child process: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pymq.cli.admin", "--namesrv", namesrv, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class RecordingTransport:
    """Collects each ``writelines`` call as one list of bytes."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []
        self.closed = False

    def writelines(self, bufs: list[Any]) -> None:
        self.calls.append(b"".join(bytes(b) for b in bufs))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


_readers = itertools.count()


async def read_all(cluster: LocalCluster, topic: str, want: int, timeout: float = 15.0) -> list[MessageExt]:
    """Poll every queue of ``topic`` until ``want`` messages arrived (or the timeout); what arrived."""
    tc = cluster.brokers[0].topics.get(topic)
    assert tc is not None
    group = f"reader-{topic}-{next(_readers)}"  # a new group each time: reads from the first offset
    pc = PullConsumer(cluster.namesrv_addr, group, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue(topic, "broker-a", q) for q in range(tc.readQueueNums)])
    out: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    async with pc:
        while len(out) < want and time.monotonic() < deadline:
            out.extend(await pc.poll(timeout=0.5))
    return out
