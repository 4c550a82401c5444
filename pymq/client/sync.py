"""A blocking facade over the asyncio client, for code without an event loop.

Same names as :mod:`pymq.client`, blocking calls::

    from pymq.client.sync import Message, Producer, PullConsumer

    with Producer("127.0.0.1:9876") as producer:
        producer.send(Message("orders", b"hello"))

    with PullConsumer("127.0.0.1:9876", "reports") as consumer:   # consumer.subscribe(...) first
        msgs = consumer.poll(timeout=1.0)

The asyncio objects live on one background event-loop thread per process (started on
first use, a daemon thread); each blocking call runs a coroutine there and waits for it.
Push-consumer listeners given here should be plain functions: they run in the consumer's
thread pool, never on the caller's thread.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from pymq.client import producer as _producer
from pymq.client import pull_consumer as _pull
from pymq.client import push_consumer as _push
from pymq.client.consumer_types import ConsumeFromWhere, ConsumeOrderlyResult, ConsumeResult, MessageModel
from pymq.client.producer import SendResult, SendStatus
from pymq.protocol.message import Message, MessageExt
from pymq.protocol.route import MessageQueue
from pymq.transport.loop import new_event_loop

T = TypeVar("T")


class _LoopThread:
    """The process-wide event loop that runs the asyncio client for blocking callers."""

    _instance: _LoopThread | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pymq-sync-loop", daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    @classmethod
    def get(cls) -> _LoopThread:
        with cls._guard:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = cls()
            return cls._instance

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("blocking pymq call made from the pymq loop thread (use the asyncio API there)")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"pymq call did not finish within {timeout}s") from None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


class _Blocking:
    """Wraps an asyncio client object: its coroutine methods become blocking calls."""

    _async_cls: type = object

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._runner = _LoopThread.get()
        self._target = self._async_cls(*args, **kwargs)
        self._started = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):

            @functools.wraps(attr)
            def call(*args: Any, **kwargs: Any) -> Any:
                return self._runner.run(attr(*args, **kwargs))

            return call
        return attr

    def start(self) -> Any:
        self._runner.run(self._target.start())
        self._started = True
        _open.add(self)
        return self

    def close(self) -> None:
        if self._started:
            self._started = False
            _open.discard(self)
            self._runner.run(self._target.close())

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Producer(_Blocking):
    """Blocking :class:`pymq.client.Producer`."""

    _async_cls = _producer.Producer

    def send_with_callback(self, msg: Message, callback: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        """Send in the background; ``callback(result, error)`` runs on the loop thread (keep it short)."""

        async def go() -> None:
            await self._target.send_with_callback(msg, callback, **kwargs)

        return self._runner.submit(go())


class PushConsumer(_Blocking):
    """Blocking :class:`pymq.client.PushConsumer`; listeners are plain functions run in its thread pool."""

    _async_cls = _push.PushConsumer


class PullConsumer(_Blocking):
    """Blocking :class:`pymq.client.PullConsumer`."""

    _async_cls = _pull.PullConsumer

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        return self._runner.run(self._target.poll(timeout), timeout + 30.0)


_open: set[_Blocking] = set()


@atexit.register
def _close_all() -> None:
    # Leave the group cleanly when a script exits without closing.
    for obj in list(_open):
        try:
            obj.close()
        except Exception:
            pass


__all__ = [
    "ConsumeFromWhere",
    "ConsumeOrderlyResult",
    "ConsumeResult",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "SendResult",
    "SendStatus",
]
