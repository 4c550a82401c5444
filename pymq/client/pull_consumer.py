"""The pull consumer (RocketMQ's lite pull consumer): you call ``poll()``.

    async with PullConsumer("127.0.0.1:9876", "reporting") as consumer:   # after subscribe()/assign()
        while True:
            for msg in await consumer.poll(timeout=1.0):
                ...
            # auto-commit (default) commits what poll() returned; or: await consumer.commit()

        async for msg in consumer:                  # the same, message by message, until close()
            ...
        async for batch in consumer.batches():      # or poll()'s non-empty batches
            ...

``subscribe()`` shares the topic's queues with the rest of the group (rebalance);
``assign()`` takes explicit queues. Pulling runs in the background into a bounded buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from pymq.client.consumer_base import ConsumerBase
from pymq.client.consumer_types import MessageModel
from pymq.client.hooks import ConsumeEvent, ConsumeHook, after_consume, before_consume
from pymq.client.process_queue import ProcessQueue
from pymq.errors import ClientError, ClosedError, PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.filter import Subscription
from pymq.protocol.message import MessageExt
from pymq.protocol.route import MessageQueue
from pymq.tasks import wait_within

PULL_DELAY_PAUSED = 0.1


class PullConsumer(ConsumerBase):
    consume_type = "CONSUME_ACTIVELY"
    uses_retry_topic = False

    def __init__(
        self,
        namesrv: str | list[str],
        group: str,
        *,
        auto_commit: bool = True,
        poll_batch_size: int = 32,
        max_buffered_messages: int = 10_000,
        **options: Any,
    ) -> None:
        super().__init__(namesrv, group, **options)
        self.auto_commit = auto_commit
        self.poll_batch_size = poll_batch_size
        self.max_buffered_messages = max_buffered_messages
        self._assigned: list[MessageQueue] | None = None
        self._buffer: asyncio.Queue[tuple[MessageQueue, ProcessQueue, list[MessageExt]]] = asyncio.Queue()
        self._buffered = 0
        self._paused: set[MessageQueue] = set()
        #: next offset after what poll() returned, per queue, not yet committed (manual commit)
        self._consumed: dict[MessageQueue, int] = {}
        #: hooks around what poll() hands over (see pymq.client.hooks); empty: poll skips them
        self.hooks: list[ConsumeHook] = []

    # --- what to consume ---------------------------------------------------------------------------------

    def assign(self, queues: list[MessageQueue]) -> None:
        """Consume exactly these queues (no rebalance)."""
        if self._started:
            raise ClientError("assign before start()")
        self._assigned = sorted(set(queues))
        for mq in self._assigned:
            self.subscriptions.setdefault(mq.topic, Subscription.parse(mq.topic, "*"))

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of a topic (for ``assign``)."""
        return list(await self._instance().routes.read_queues(topic))

    async def _do_rebalance(self) -> None:
        if self._assigned is None:
            await super()._do_rebalance()
            return
        for topic in {mq.topic for mq in self._assigned}:
            await self.ownership.update(topic, {mq for mq in self._assigned if mq.topic == topic})

    def add_hook(self, hook: ConsumeHook) -> None:
        """Call ``hook.before_consume(event)`` / ``hook.after_consume(event)`` on every poll that returns messages.

        Both run just before :meth:`poll` returns (``event.kind == "receive"``, ``event.started``
        when the poll began): the application processes the messages after that.
        """
        self.hooks.append(hook)

    # --- polling -------------------------------------------------------------------------------------------

    def _flow_control_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        if mq in self._paused:
            return PULL_DELAY_PAUSED
        if self._buffered >= self.max_buffered_messages:
            return 0.05
        return super()._flow_control_delay(mq, pq)

    async def _deliver(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        self._buffered += len(msgs)
        self._buffer.put_nowait((mq, pq, msgs))

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """Up to ``poll_batch_size`` messages, waiting at most ``timeout`` seconds for the first."""
        self._instance()
        out: list[MessageExt] = []
        started = time.perf_counter()
        deadline = time.monotonic() + timeout
        while len(out) < self.poll_batch_size:
            if self._buffer.empty() and out:
                break
            remaining = deadline - time.monotonic()
            try:
                if self._buffer.empty():
                    if remaining <= 0:
                        break
                    item = await wait_within(self._buffer.get(), remaining)
                else:
                    item = self._buffer.get_nowait()
            except TimeoutError:
                break
            mq, pq, msgs = item
            self._buffered -= len(msgs)
            if pq.dropped:
                continue
            room = self.poll_batch_size - len(out)
            take, rest = msgs[:room], msgs[room:]
            if rest:
                # Keep the remainder at the head: re-queueing at the tail would reorder the queue.
                self._requeue_front(mq, pq, rest)
            out.extend(take)
            next_offset = pq.remove(take)
            if self.auto_commit:
                self.offset_store.update(mq, next_offset, increase_only=True)  # type: ignore[union-attr]
            else:
                self._consumed[mq] = max(self._consumed.get(mq, -1), next_offset)
        if out and self.hooks:
            hooks = self.hooks
            after_consume(hooks, before_consume(hooks, ConsumeEvent(self.group, out, started, "receive")), out, None)
        return out

    async def batches(self, timeout: float = 1.0) -> AsyncIterator[list[MessageExt]]:
        """The non-empty batches :meth:`poll` returns, until the consumer is closed.

        Each batch is committed as :meth:`poll` commits (auto-commit: once returned).
        """
        while not self._closing:
            try:
                batch = await self.poll(timeout)
            except ClosedError:
                return
            if batch:
                yield batch

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        """``async for msg in consumer``: the messages of :meth:`batches`, one by one."""
        return self._messages()

    async def _messages(self) -> AsyncIterator[MessageExt]:
        async for batch in self.batches():
            for msg in batch:
                yield msg

    def _requeue_front(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        items = [(mq, pq, msgs)]
        while not self._buffer.empty():
            items.append(self._buffer.get_nowait())
        for it in items:
            self._buffer.put_nowait(it)
        self._buffered += len(msgs)

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commit what ``poll()`` returned so far (or the given next offsets) and persist at once."""
        store = self.offset_store
        if store is None:
            raise ClientError("consumer is not started")
        table = offsets if offsets is not None else self._consumed
        for mq, off in table.items():
            store.update(mq, off)
        if offsets is None:
            self._consumed.clear()
        await store.persist(list(table) or list(self.process_queues))

    async def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset for a queue (-1 if none)."""
        store = self.offset_store
        if store is None:
            raise ClientError("consumer is not started")
        return await store.read(mq)

    # --- seeking and pausing ---------------------------------------------------------------------------------

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Make the next messages of ``mq`` come from ``offset``."""
        if mq not in self.process_queues:
            raise ClientError(f"{mq} is not assigned to this consumer")
        await self.ownership.restart(mq, offset)
        self._consumed.pop(mq, None)
        self.offset_store.update(mq, offset)  # type: ignore[union-attr]  # before the new pull task first runs

    async def seek_to_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """Seek to the first message stored at or after ``timestamp_ms``; returns that offset."""
        offset = await self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp_ms)
        await self.seek(mq, offset)
        return offset

    async def seek_to_begin(self, mq: MessageQueue) -> int:
        offset = await self._queue_offset(RequestCode.GET_MIN_OFFSET, mq)
        await self.seek(mq, offset)
        return offset

    async def seek_to_end(self, mq: MessageQueue) -> int:
        offset = await self._queue_offset(RequestCode.GET_MAX_OFFSET, mq)
        await self.seek(mq, offset)
        return offset

    def pause(self, queues: list[MessageQueue]) -> None:
        """Stop pulling these queues (already buffered messages are still returned)."""
        self._paused.update(queues)

    def resume(self, queues: list[MessageQueue]) -> None:
        self._paused.difference_update(queues)

    def _advance(self, mq: MessageQueue, offset: int) -> None:
        if self.auto_commit:
            super()._advance(mq, offset)
        elif self._consumed.get(mq, -1) < offset:
            # Manual commit: skipped ranges are committed with the next commit().
            self._consumed[mq] = offset

    async def persist_offsets(self) -> None:
        with contextlib.suppress(PymqError):
            await super().persist_offsets()


__all__ = ["MessageModel", "PullConsumer"]
