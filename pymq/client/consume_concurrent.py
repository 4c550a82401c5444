"""Concurrent consumption: pulled batches are consumed in parallel, up to a concurrency limit.

The unit of work is one pulled batch: the listener is called on it in slices of
``consume_batch_max_size`` messages, one after another, so a fast listener costs one task
(or one thread hand-off) per pull, not per message. Batches from different pulls and
queues run side by side. After a batch, consumed messages leave the process queue and the
queue's commit offset moves to the smallest offset still in flight.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from pymq.client.consume_service import ConsumeContext
from pymq.client.consumer_types import ConsumeResult
from pymq.client.process_queue import ProcessQueue
from pymq.client.rebalance import NoQueueHooks
from pymq.logs import get_logger
from pymq.protocol.message import MessageExt
from pymq.protocol.route import MessageQueue
from pymq.tasks import wait_within

log = get_logger("client.consume")

LOCAL_RETRY_DELAY = 5.0
PULL_DELAY_FLOW_CONTROL = 0.05


def _is_success(result: Any) -> bool:
    return result is None or result == ConsumeResult.SUCCESS or result == ConsumeResult.SUCCESS.value


class ConcurrentConsumeService(NoQueueHooks):
    """A :class:`~pymq.client.consume_service.ConsumeService`: one task per pulled batch."""

    def __init__(self, ctx: ConsumeContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.listener = ctx.listener
        self._sem = asyncio.Semaphore(ctx.settings.concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._later_tasks: set[asyncio.Task[None]] = set()
        self.consumed = 0
        self.failed = 0

    async def masters_moved(self, brokers: set[str]) -> None:
        return None  # no locks: pulls and commits follow the route by themselves

    async def start(self) -> None:
        return None

    def submit(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        task = asyncio.ensure_future(self._consume(mq, pq, msgs))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def pull_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        """Hold pulling while the queue's in-flight offsets span too far (a slow message holds the commit)."""
        return PULL_DELAY_FLOW_CONTROL if pq.span > self.settings.max_span else 0.0

    async def close(self) -> None:
        """Let running batches finish (their offsets are committed by the consumer's close).

        Local retries still waiting are dropped: those messages were never committed, so
        they are delivered again after a restart or to the queue's next owner.
        """
        for t in list(self._later_tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- one batch -----------------------------------------------------------------------------------------

    def _run_listener_sync(self, msgs: list[MessageExt], out: list[bool], stop: threading.Event) -> None:
        """Thread-pool side: call a blocking listener slice by slice, appending one result per message."""
        size = self.settings.batch_max_size
        for i in range(0, len(msgs), size):
            if stop.is_set():  # timed out: the rest count as failed and go back
                return
            chunk = msgs[i : i + size]
            try:
                ok = _is_success(self.listener(chunk))
            except Exception:
                log.exception("listener_failed", group=self.settings.group, count=len(chunk))
                ok = False
            out.extend([ok] * len(chunk))

    async def _run_listener_async(self, msgs: list[MessageExt], out: list[bool]) -> None:
        size = self.settings.batch_max_size
        for i in range(0, len(msgs), size):
            chunk = msgs[i : i + size]
            try:
                ok = _is_success(await self.listener(chunk))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("listener_failed", group=self.settings.group, count=len(chunk))
                ok = False
            out.extend([ok] * len(chunk))

    async def _consume(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        settings = self.settings
        executor = self.ctx.executor
        async with self._sem:
            if pq.dropped:
                return
            out: list[bool] = []
            stop: threading.Event | None = None
            try:
                if executor is not None:
                    stop = threading.Event()
                    fut = asyncio.get_running_loop().run_in_executor(executor, self._run_listener_sync, msgs, out, stop)
                    await wait_within(fut, settings.timeout)
                else:
                    await wait_within(self._run_listener_async(msgs, out), settings.timeout)
            except TimeoutError:
                if stop is not None:
                    stop.set()
                log.warning("consume_timeout", group=settings.group, queue=str(mq), count=len(msgs) - len(out))
            # Slices finished before a timeout keep their result; the rest failed.
            results = out[: len(msgs)]
            results += [False] * (len(msgs) - len(results))
        failed = [m for m, ok in zip(msgs, results, strict=True) if not ok]
        self.consumed += len(msgs) - len(failed)
        retry_locally: list[MessageExt] = []
        if failed:
            self.failed += len(failed)
            if settings.clustering:
                retry_locally = await self._send_back(failed)
            else:
                log.warning("broadcast_consume_failed_dropped", group=settings.group, count=len(failed))
        done = msgs if not retry_locally else [m for m in msgs if m not in retry_locally]
        if not pq.dropped:
            offset = pq.remove(done)
            if offset >= 0:
                self.ctx.offset_store.update(mq, offset, increase_only=True)
        if retry_locally:
            self._later(mq, pq, retry_locally)

    async def _send_back(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """Send failed messages back; returns those that could not be (retried here later)."""
        send_back = self.ctx.send_back
        max_times = self.settings.max_reconsume_times
        results = await asyncio.gather(*(send_back(m, 0, max_times) for m in msgs))
        keep: list[MessageExt] = []
        for m, ok in zip(msgs, results, strict=True):
            if not ok:
                m.reconsume_times += 1
                keep.append(m)
        return keep

    def _later(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        async def resubmit() -> None:
            await asyncio.sleep(LOCAL_RETRY_DELAY)
            if not pq.dropped:
                await self._consume(mq, pq, msgs)

        task = asyncio.ensure_future(resubmit())
        self._later_tasks.add(task)
        task.add_done_callback(self._later_tasks.discard)
