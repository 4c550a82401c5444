"""The push consumer: pulls in the background and calls your listener.

    consumer = PushConsumer("127.0.0.1:9876", "order-service")
    consumer.subscribe("orders", "created || paid")

    @consumer.listener
    async def handle(msgs: list[MessageExt]) -> ConsumeResult:
        ...
        return ConsumeResult.SUCCESS

    async with consumer:
        await asyncio.Event().wait()

Listeners may be coroutine functions (run on the event loop) or plain functions (run in a
thread pool so they may block). Each listener call gets at most ``consume_batch_max_size``
messages. A concurrent listener that returns RECONSUME_LATER, raises, or runs past
``consume_timeout`` sends the messages back for a later retry (clustering only); an
orderly listener (:meth:`PushConsumer.register_orderly_listener`) consumes each queue in
order under a broker lock.
"""

from __future__ import annotations

import inspect
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pymq.client.consume_concurrent import ConcurrentConsumeService
from pymq.client.consume_directly import consume_directly
from pymq.client.consume_orderly import BrokerQueueLocks, OrderlyConsumeService
from pymq.client.consume_service import ConsumeContext, ConsumeService, ConsumeSettings, Listener
from pymq.client.consumer_base import ConsumerBase
from pymq.client.consumer_types import ConsumeOrderlyResult, ConsumeResult, MessageModel
from pymq.client.hooks import ConsumeHook, hooked_listener
from pymq.client.process_queue import ProcessQueue
from pymq.client.send_back import send_back
from pymq.errors import ClientError
from pymq.protocol.message import MessageExt
from pymq.protocol.route import MessageQueue


class PushConsumer(ConsumerBase):
    consume_type = "CONSUME_PASSIVELY"
    pulls_ahead = True

    def __init__(
        self,
        namesrv: str | list[str],
        group: str,
        *,
        consume_concurrency: int = 20,
        consume_batch_max_size: int = 1,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int | None = None,
        consume_timeout: float = 15 * 60,
        suspend_current_queue_time: float = 1.0,
        lock_renew_interval: float = 20.0,
        lock_valid_seconds: float = 30.0,
        **options: Any,
    ) -> None:
        super().__init__(namesrv, group, **options)
        if consume_concurrency < 1 or consume_batch_max_size < 1:
            raise ClientError("consume_concurrency and consume_batch_max_size must be at least 1")
        self.consume_concurrency = consume_concurrency
        self.consume_batch_max_size = consume_batch_max_size
        self.consume_concurrently_max_span = consume_concurrently_max_span
        #: None: the broker's group setting (retryMaxTimes, 16 by default) decides
        self.max_reconsume_times = max_reconsume_times
        self.consume_timeout = consume_timeout
        self.suspend_current_queue_time = min(30.0, max(0.01, suspend_current_queue_time))
        #: orderly: how often queue locks are renewed, and how long a renewed lock is trusted
        self.lock_renew_interval = lock_renew_interval
        self.lock_valid_seconds = lock_valid_seconds
        self._listener: Listener | None = None
        self._orderly = False
        #: before/after hooks around every listener call (see pymq.client.hooks)
        self.hooks: list[ConsumeHook] = []
        #: chosen at start by the kind of listener; every consumption hook goes to it
        self.service: ConsumeService | None = None
        self.executor: ThreadPoolExecutor | None = None
        #: the listener as the service calls it (hooks included), once started
        self._running_listener: Listener | None = None

    # --- listeners ------------------------------------------------------------------------------------------

    def register_listener(self, listener: Listener) -> None:
        """A concurrent listener: ``fn(msgs) -> ConsumeResult | None``, sync or async."""
        self._set_listener(listener, orderly=False)

    def register_orderly_listener(self, listener: Listener) -> None:
        """An orderly listener: ``fn(msgs) -> ConsumeOrderlyResult | None``; each queue in offset order."""
        self._set_listener(listener, orderly=True)

    def listener(self, fn: Listener) -> Listener:
        """Decorator form of :meth:`register_listener`."""
        self.register_listener(fn)
        return fn

    def orderly_listener(self, fn: Listener) -> Listener:
        """Decorator form of :meth:`register_orderly_listener`."""
        self.register_orderly_listener(fn)
        return fn

    def add_hook(self, hook: ConsumeHook) -> None:
        """Call ``hook.before_consume(event)`` / ``hook.after_consume(event)`` around every listener call."""
        if self._started:
            raise ClientError("add hooks before start()")
        self.hooks.append(hook)

    def _set_listener(self, listener: Listener, *, orderly: bool) -> None:
        if self._started:
            raise ClientError("register the listener before start()")
        if not callable(listener):
            raise ClientError("the listener must be callable")
        self._listener = listener
        self._orderly = orderly
        self.consume_type = "CONSUME_PASSIVELY"

    @property
    def is_async_listener(self) -> bool:
        fn = self._listener
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)

    @property
    def orderly(self) -> bool:
        return self._orderly

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def _on_start(self) -> None:
        listener = self._listener
        if listener is None:
            raise ClientError("register a listener before start()")
        if not self.is_async_listener:
            self.executor = ThreadPoolExecutor(
                self.consume_concurrency, thread_name_prefix=f"pymq-consume-{self.group}"
            )
        if self.hooks:
            listener = hooked_listener(listener, list(self.hooks), self.group, is_async=self.is_async_listener)
        self._running_listener = listener
        ctx = self._consume_context(listener)
        if self._orderly:
            inst = self._instance()
            self.service = OrderlyConsumeService(ctx, BrokerQueueLocks(inst, self.group))
        else:
            self.service = ConcurrentConsumeService(ctx)
        # Queues change hands through the service (orderly: lock, finish the batch, unlock).
        self.ownership.hooks = self.service
        await self.service.start()

    def _consume_context(self, listener: Listener) -> ConsumeContext:
        """What the consume service gets instead of this consumer."""
        inst = self._instance()
        store = self.offset_store
        assert store is not None
        group = self.group

        async def back(msg: MessageExt, delay_level: int, max_reconsume_times: int | None) -> bool:
            return await send_back(inst, group, msg, delay_level=delay_level, max_reconsume_times=max_reconsume_times)

        settings = ConsumeSettings(
            group=group,
            clustering=self.message_model is MessageModel.CLUSTERING,
            concurrency=self.consume_concurrency,
            batch_max_size=self.consume_batch_max_size,
            max_span=self.consume_concurrently_max_span,
            max_reconsume_times=self.max_reconsume_times,
            timeout=self.consume_timeout,
            suspend_current_queue_time=self.suspend_current_queue_time,
            lock_renew_interval=self.lock_renew_interval,
            lock_valid_seconds=self.lock_valid_seconds,
        )
        return ConsumeContext(
            settings, listener, self.executor, self.process_queues, store, back, self.persist_offsets, self.clock
        )

    async def _on_close(self) -> None:
        if self.service is not None:
            await self.service.close()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    async def consume_message_directly(self, msg: MessageExt, client_id: str) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on ``msg`` now; no offset moves, a failure is not sent
        back (see :mod:`pymq.client.consume_directly`)."""
        listener = self._running_listener
        if listener is None or self._closing:
            raise ClientError(f"the consumer of group {self.group} is not running")
        return await consume_directly(
            listener,
            msg,
            is_async=self.is_async_listener,
            executor=self.executor,
            orderly=self._orderly,
            client_id=client_id,
        )

    # --- pulling side: what to do with pulled messages and when to pull belong to the service -------------

    def _service(self) -> ConsumeService:
        service = self.service
        assert service is not None, "the consume service is created at start"
        return service

    def _flow_control_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        return super()._flow_control_delay(mq, pq) or self._service().pull_delay(mq, pq)

    async def masters_moved(self, brokers: set[str]) -> None:
        if self.service is not None and not self._closing:
            await self.service.masters_moved(brokers)

    async def _deliver(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        self._service().submit(mq, pq, msgs)


__all__ = ["ConsumeOrderlyResult", "ConsumeResult", "Listener", "PushConsumer"]
