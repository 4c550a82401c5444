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
from typing import TYPE_CHECKING, Any

from pymq.client.consumer_types import ConsumeResult, MessageModel
from pymq.client.process_queue import ProcessQueue
from pymq.client.send_back import send_back
from pymq.logs import get_logger
from pymq.protocol.message import MessageExt
from pymq.protocol.route import MessageQueue

if TYPE_CHECKING:
    from pymq.client.push_consumer import Listener, PushConsumer

log = get_logger("client.consume")

LOCAL_RETRY_DELAY = 5.0


def _is_success(result: Any) -> bool:
    return result is None or result == ConsumeResult.SUCCESS or result == ConsumeResult.SUCCESS.value


class ConcurrentConsumeService:
    def __init__(self, consumer: PushConsumer, listener: Listener) -> None:
        self.consumer = consumer
        self.listener = listener
        self._sem = asyncio.Semaphore(consumer.consume_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._later_tasks: set[asyncio.Task[None]] = set()
        self.consumed = 0
        self.failed = 0

    async def start(self) -> None:
        return None

    def submit(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        task = asyncio.ensure_future(self._consume(mq, pq, msgs))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def pull_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        return 0.0

    async def queue_released(self, mq: MessageQueue, pq: ProcessQueue | None) -> None:
        return None

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
        size = self.consumer.consume_batch_max_size
        for i in range(0, len(msgs), size):
            if stop.is_set():  # timed out: the rest count as failed and go back
                return
            chunk = msgs[i : i + size]
            try:
                ok = _is_success(self.listener(chunk))
            except Exception:
                log.exception("listener_failed", group=self.consumer.group, count=len(chunk))
                ok = False
            out.extend([ok] * len(chunk))

    async def _run_listener_async(self, msgs: list[MessageExt], out: list[bool]) -> None:
        size = self.consumer.consume_batch_max_size
        for i in range(0, len(msgs), size):
            chunk = msgs[i : i + size]
            try:
                ok = _is_success(await self.listener(chunk))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("listener_failed", group=self.consumer.group, count=len(chunk))
                ok = False
            out.extend([ok] * len(chunk))

    async def _consume(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        consumer = self.consumer
        async with self._sem:
            if pq.dropped:
                return
            out: list[bool] = []
            stop: threading.Event | None = None
            try:
                if consumer.executor is not None:
                    stop = threading.Event()
                    fut = asyncio.get_running_loop().run_in_executor(
                        consumer.executor, self._run_listener_sync, msgs, out, stop
                    )
                    await asyncio.wait_for(fut, consumer.consume_timeout)
                else:
                    await asyncio.wait_for(self._run_listener_async(msgs, out), consumer.consume_timeout)
            except TimeoutError:
                if stop is not None:
                    stop.set()
                log.warning("consume_timeout", group=consumer.group, queue=str(mq), count=len(msgs) - len(out))
            # Slices finished before a timeout keep their result; the rest failed.
            results = out[: len(msgs)]
            results += [False] * (len(msgs) - len(results))
        failed = [m for m, ok in zip(msgs, results, strict=True) if not ok]
        self.consumed += len(msgs) - len(failed)
        retry_locally: list[MessageExt] = []
        if failed:
            self.failed += len(failed)
            if consumer.message_model is MessageModel.CLUSTERING:
                retry_locally = await self._send_back(failed)
            else:
                log.warning("broadcast_consume_failed_dropped", group=consumer.group, count=len(failed))
        done = msgs if not retry_locally else [m for m in msgs if m not in retry_locally]
        if not pq.dropped:
            offset = pq.remove(done)
            if offset >= 0:
                consumer.offset_store.update(mq, offset, increase_only=True)  # type: ignore[union-attr]
        if retry_locally:
            self._later(mq, pq, retry_locally)

    async def _send_back(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """Send failed messages back; returns those that could not be (retried here later)."""
        consumer = self.consumer
        inst = consumer.instance
        assert inst is not None
        results = await asyncio.gather(
            *(send_back(inst, consumer.group, m, max_reconsume_times=consumer.max_reconsume_times) for m in msgs)
        )
        keep = []
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
