"""A blocking facade over the asyncio client, for code without an event loop.

Same names as :mod:`pymq.client`, blocking calls::

    from pymq.client.sync import Message, Producer, PullConsumer

    with Producer("127.0.0.1:9876") as producer:
        result = producer.send(Message("orders", b"hello"))     # a SendResult

    consumer = PullConsumer("127.0.0.1:9876", "reports")
    consumer.subscribe("orders")
    with consumer:
        for msg in consumer:                                    # until close() or break
            ...

The asyncio objects live on one background event-loop thread per process (started on
first use, a daemon thread); each blocking call runs the asyncio method there and waits
for it. Every method is the asyncio class's own, made blocking by :func:`_blocking` (so
the signatures and result types are those of :mod:`pymq.client`); ``aio`` gives the
asyncio object for anything else. Push-consumer listeners given here should be plain
functions: they run in the consumer's thread pool, never on the caller's thread.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar, cast

from pymq.client import producer as _producer
from pymq.client import pull_consumer as _pull
from pymq.client import push_consumer as _push
from pymq.client import simple_consumer as _simple
from pymq.client import transaction_producer as _tx
from pymq.client.consumer_base import ConsumerBase
from pymq.client.consumer_types import ConsumeFromWhere, ConsumeOrderlyResult, ConsumeResult, MessageModel
from pymq.client.producer import SendResult, SendStatus
from pymq.client.transaction_producer import TransactionSendResult, TransactionState
from pymq.errors import ClosedError, LocalTransactionError
from pymq.protocol.message import Message, MessageExt
from pymq.protocol.route import MessageQueue
from pymq.transport.loop import new_event_loop

T = TypeVar("T")
P = ParamSpec("P")


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
        """Run ``coro`` on the loop and wait for its result."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("blocking pymq call made from the pymq loop thread (use the asyncio API there)")
        # What run_coroutine_threadsafe does, without its two-way future chaining: one task on the
        # loop whose done callback releases a lock this thread waits on (a few µs less per call).
        loop = self.loop
        finished = threading.Lock()
        finished.acquire()
        outcome: list[Any] = []  # the task, or what kept it from starting

        def start() -> None:
            try:
                task = loop.create_task(coro)
            except BaseException as exc:
                coro.close()
                outcome.append(exc)
                finished.release()
                return
            outcome.append(task)
            task.add_done_callback(lambda _task: finished.release())

        def cancel() -> None:  # (runs after start: the loop runs callbacks in order)
            for task in outcome:
                if isinstance(task, asyncio.Task):
                    task.cancel()

        loop.call_soon_threadsafe(start)
        if not finished.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            loop.call_soon_threadsafe(cancel)
            raise TimeoutError(f"pymq call did not finish within {timeout}s")
        task = outcome[0]
        if not isinstance(task, asyncio.Task):
            raise task
        if task.cancelled():  # (as a concurrent future's result() reports it)
            raise concurrent.futures.CancelledError()
        return cast(T, task.result())  # the task is done: its result, or its exception raised

    def call(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the loop (the asyncio objects are not thread-safe) and wait."""

        async def go() -> T:
            return fn()

        return self.run(go())

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


class _Lifecycle(Protocol):
    async def start(self) -> Any: ...

    async def close(self) -> None: ...


A = TypeVar("A", bound=_Lifecycle)


class _Blocking(Generic[A]):
    """Owns one asyncio client object on the loop thread: its start/close and context manager."""

    def __init__(self, target: A) -> None:
        self._runner = _LoopThread.get()
        self._target = target
        self._started = False

    @property
    def aio(self) -> A:
        """The asyncio object underneath; use it only on the pymq loop thread."""
        return self._target

    def start(self) -> Self:
        self._runner.run(self._target.start())
        self._started = True
        _open.add(self)
        return self

    def close(self) -> None:
        if self._started:
            self._started = False
            _open.discard(self)
            self._runner.run(self._target.close())

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _blocking(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[_Blocking[Any], P], T]:
    """The blocking form of an asyncio method: same parameters, the coroutine's result type."""

    @functools.wraps(method)
    def call(self: _Blocking[Any], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._runner.run(method(self._target, *args, **kwargs))

    return call


def _on_loop(method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[_Blocking[Any], P], T]:
    """A plain method of the asyncio object, run on the loop thread (where that object lives)."""

    @functools.wraps(method)
    def call(self: _Blocking[Any], /, *args: P.args, **kwargs: P.kwargs) -> T:
        target = self._target
        return self._runner.call(lambda: method(target, *args, **kwargs))

    return call


class Producer(_Blocking[_producer.Producer]):
    """Blocking :class:`pymq.client.Producer` (same options)."""

    def __init__(self, namesrv: str | list[str], group: str = "DEFAULT_PRODUCER", **options: Any) -> None:
        super().__init__(_producer.Producer(namesrv, group, **options))

    send = _blocking(_producer.Producer.send)
    send_batch = _blocking(_producer.Producer.send_batch)
    send_delayed = _blocking(_producer.Producer.send_delayed)
    send_oneway = _blocking(_producer.Producer.send_oneway)
    queues_for = _blocking(_producer.Producer.queues_for)
    add_hook = _on_loop(_producer.Producer.add_hook)

    def send_with_callback(
        self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], Any], **kwargs: Any
    ) -> concurrent.futures.Future[None]:
        """Send in the background; ``callback(result, error)`` runs on the loop thread (keep it short)."""

        async def go() -> None:
            await self._target.send_with_callback(msg, callback, **kwargs)

        return self._runner.submit(go())


class TransactionProducer(_Blocking[_tx.TransactionProducer]):
    """Blocking :class:`pymq.client.TransactionProducer` (same options).

    ``local_tx(message, arg)`` runs on the calling thread (so it can use the caller's database
    connection); ``checker(message)`` runs on a worker thread when a broker checks back, so it
    opens its own connection (sqlite3 connections belong to the thread that made them).
    """

    def __init__(
        self,
        namesrv: str | list[str],
        group: str,
        checker: Callable[[MessageExt], TransactionState],
        **options: Any,
    ) -> None:
        async def check_on_a_thread(msg: MessageExt) -> TransactionState:
            return await asyncio.to_thread(checker, msg)

        super().__init__(_tx.TransactionProducer(namesrv, group, check_on_a_thread, **options))

    send = _blocking(_producer.Producer.send)
    send_half = _blocking(_tx.TransactionProducer.send_half)
    end_transaction = _blocking(_tx.TransactionProducer.end_transaction)

    def send_in_transaction(
        self,
        msg: Message,
        local_tx: Callable[[Message, Any], TransactionState],
        arg: Any = None,
        *,
        transaction_timeout: float | None = None,
    ) -> TransactionSendResult:
        """Half send, ``local_tx(msg, arg)`` on this thread, then commit or roll back (see the asyncio class)."""
        half = self.send_half(msg, transaction_timeout=transaction_timeout)
        if half.status != SendStatus.SEND_OK:
            self.end_transaction(half, TransactionState.ROLLBACK)
            return _tx.transaction_result(half, TransactionState.ROLLBACK)
        try:
            state = _tx.as_state(local_tx(msg, arg), "local transaction")
        except Exception as exc:
            raise LocalTransactionError(f"local transaction failed: {exc!r}", half) from exc
        self.end_transaction(half, state)
        return _tx.transaction_result(half, state)


class _Consumer(_Blocking[A]):
    """What both blocking consumers wrap: subscriptions and the owned queues."""

    subscribe = _on_loop(ConsumerBase.subscribe)
    assigned_queues = _on_loop(ConsumerBase.assigned_queues)


class PushConsumer(_Consumer[_push.PushConsumer]):
    """Blocking :class:`pymq.client.PushConsumer`; listeners are plain functions run in its thread pool."""

    def __init__(self, namesrv: str | list[str], group: str, **options: Any) -> None:
        super().__init__(_push.PushConsumer(namesrv, group, **options))

    register_listener = _on_loop(_push.PushConsumer.register_listener)
    register_orderly_listener = _on_loop(_push.PushConsumer.register_orderly_listener)
    listener = _on_loop(_push.PushConsumer.listener)
    orderly_listener = _on_loop(_push.PushConsumer.orderly_listener)
    add_hook = _on_loop(_push.PushConsumer.add_hook)


class PullConsumer(_Consumer[_pull.PullConsumer]):
    """Blocking :class:`pymq.client.PullConsumer`; iterating it yields messages until it is closed."""

    def __init__(self, namesrv: str | list[str], group: str, **options: Any) -> None:
        super().__init__(_pull.PullConsumer(namesrv, group, **options))

    assign = _on_loop(_pull.PullConsumer.assign)
    pause = _on_loop(_pull.PullConsumer.pause)
    resume = _on_loop(_pull.PullConsumer.resume)
    fetch_message_queues = _blocking(_pull.PullConsumer.fetch_message_queues)
    commit = _blocking(_pull.PullConsumer.commit)
    committed = _blocking(_pull.PullConsumer.committed)
    seek = _blocking(_pull.PullConsumer.seek)
    seek_to_timestamp = _blocking(_pull.PullConsumer.seek_to_timestamp)
    seek_to_begin = _blocking(_pull.PullConsumer.seek_to_begin)
    seek_to_end = _blocking(_pull.PullConsumer.seek_to_end)
    add_hook = _on_loop(_pull.PullConsumer.add_hook)

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """Up to ``poll_batch_size`` messages, waiting at most ``timeout`` seconds for the first."""
        return self._runner.run(self._target.poll(timeout), timeout + 30.0)

    def batches(self, timeout: float = 1.0) -> Iterator[list[MessageExt]]:
        """Non-empty batches from :meth:`poll` until the consumer is closed (or the loop is left)."""
        while self._started:
            try:
                batch = self.poll(timeout)
            except ClosedError:
                return
            if batch:
                yield batch

    def __iter__(self) -> Iterator[MessageExt]:
        for batch in self.batches():
            yield from batch


class SimpleConsumer(_Blocking[_simple.SimpleConsumer]):
    """Blocking :class:`pymq.client.SimpleConsumer`: receive, then ack (or extend) each message."""

    def __init__(self, namesrv: str | list[str], group: str, **options: Any) -> None:
        super().__init__(_simple.SimpleConsumer(namesrv, group, **options))

    subscribe = _on_loop(_simple.SimpleConsumer.subscribe)
    unsubscribe = _on_loop(_simple.SimpleConsumer.unsubscribe)
    ack = _blocking(_simple.SimpleConsumer.ack)
    ack_many = _blocking(_simple.SimpleConsumer.ack_many)
    change_invisible_duration = _blocking(_simple.SimpleConsumer.change_invisible_duration)

    def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0, await_duration: float | None = None
    ) -> list[_simple.ReceivedMessage]:
        """Up to ``max_messages``, waiting at most ``await_duration`` seconds (the consumer's default if None)."""
        wait = self._target.await_duration if await_duration is None else await_duration
        return self._runner.run(self._target.receive(max_messages, invisible_duration, await_duration), wait + 30.0)


_open: set[_Blocking[Any]] = set()


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
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
]
ReceivedMessage = _simple.ReceivedMessage
