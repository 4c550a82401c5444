"""The seam between a push consumer's pulling side and the code that runs its listener.

The push consumer owns the queues (rebalance, pull tasks, process queues); a
:class:`ConsumeService` consumes what is pulled. Two implement it: concurrent
(:mod:`pymq.client.consume_concurrent`) and orderly (:mod:`pymq.client.consume_orderly`).
A service never sees the consumer: it gets a :class:`ConsumeContext` with exactly what it
needs (listener, settings, the process queues, the offset store, send-back, executor, clock).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from pymq.client.offset_store import OffsetStore
from pymq.client.process_queue import ProcessQueue
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.protocol.message import MessageExt
from pymq.protocol.route import MessageQueue

__all__ = ["ConsumeContext", "ConsumeService", "ConsumeSettings", "Listener", "SendBack"]

#: ``fn(msgs) -> result``: a coroutine function (run on the loop) or a plain one (run in the executor)
Listener = Callable[[list[MessageExt]], Any]

#: ``send_back(msg, delay_level, max_reconsume_times) -> stored``; delay level -1 dead-letters
SendBack = Callable[[MessageExt, int, int | None], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class ConsumeSettings:
    """The push consumer's consumption options, as a service reads them."""

    group: str
    #: clustering (offsets on the broker, failed messages sent back, orderly locks) or broadcasting
    clustering: bool
    concurrency: int
    batch_max_size: int
    max_span: int
    #: None: the broker's group setting decides
    max_reconsume_times: int | None
    timeout: float
    suspend_current_queue_time: float
    lock_renew_interval: float
    lock_valid_seconds: float


@dataclass(slots=True)
class ConsumeContext:
    """What a consume service is given instead of the consumer."""

    settings: ConsumeSettings
    listener: Listener
    #: the thread pool of a blocking listener; None for a coroutine listener
    executor: Executor | None
    #: the consumer's owned queues (read-only for the service)
    process_queues: Mapping[MessageQueue, ProcessQueue]
    offset_store: OffsetStore
    send_back: SendBack
    #: commit the owned queues' offsets now (orderly: before giving locks back)
    persist_offsets: Callable[[], Awaitable[None]]
    clock: Clock = SYSTEM_CLOCK


class ConsumeService(Protocol):
    """Runs the listener over pulled messages; told when queues are taken and released."""

    consumed: int

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Let consumption in flight finish (the consumer then commits offsets)."""
        ...

    def submit(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Messages were pulled from ``mq`` (already added to ``pq``)."""
        ...

    def pull_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        """Seconds to hold the next pull of ``mq`` back (flow control or lock); 0 to pull now."""
        ...

    async def can_take(self, mq: MessageQueue) -> bool:
        """Rebalance may take ``mq`` (orderly: once its broker lock is held)."""
        ...

    def queue_taken(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Rebalance took ``mq``; pulling starts next."""
        ...

    def can_release(self, mq: MessageQueue) -> bool:
        """Rebalance may give ``mq`` up now (orderly: not while its master is away)."""
        ...

    async def queue_released(self, mq: MessageQueue, pq: ProcessQueue | None) -> None:
        """Pulling ``mq`` stopped, before its offset is committed (orderly: let the batch finish)."""
        ...

    async def after_queue_released(self, mq: MessageQueue) -> None:
        """``mq``'s offset is committed (orderly: give the broker lock back)."""
        ...

    async def masters_moved(self, brokers: set[str]) -> None:
        """These broker groups have a new master (issue 32; orderly: lock their queues there now)."""
        ...
