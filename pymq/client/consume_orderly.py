"""Orderly consumption: each queue consumed by one task, in offset order, under a broker lock.

Clustering consumers lock a queue on its master (LOCK_BATCH_MQ) before pulling it, renew
all their locks every ``lock_renew_interval`` (20 s) and trust a lock for
``lock_valid_seconds`` (30 s) after the last successful renewal; the broker expires locks
after 60 s, so a crashed consumer's queues move on once its locks lapse.

The listener returns SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT. On suspend (or an
exception) the same messages are offered again after ``suspend_current_queue_time``, still
in order. Unlike RocketMQ's unbounded default, a message failing ``max_reconsume_times``
times (16 unless set) goes to the dead-letter queue and the queue moves on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Any, Protocol

from pymq.client import broker_api
from pymq.client.consume_service import ConsumeContext
from pymq.client.consumer_types import ConsumeOrderlyResult
from pymq.client.instance import ClientInstance
from pymq.client.process_queue import ProcessQueue
from pymq.errors import PymqError
from pymq.logs import get_logger
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.message import MessageExt
from pymq.protocol.requests import LOCK_OK_MQ_SET
from pymq.protocol.route import MASTER_ID, MessageQueue
from pymq.tasks import cancel_and_wait, wait_within

log = get_logger("client.orderly")

DEFAULT_MAX_RECONSUME = 16
PULL_DELAY_NOT_LOCKED = 3.0
LOCK_REQUEST_TIMEOUT = 3.0
#: after a new master appears, how often and how many times to try locking there before the renewal loop
RELOCK_RETRY_SECONDS = 0.5
RELOCK_ATTEMPTS = 20


def _is_success(result: Any) -> bool:
    return result is None or result in (ConsumeOrderlyResult.SUCCESS, ConsumeOrderlyResult.SUCCESS.value)


class QueueLocks(Protocol):
    """Broker-side queue locks of one consumer group (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)."""

    async def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """Lock or renew ``mqs``; returns those now held."""
        ...

    async def unlock(self, mqs: list[MessageQueue]) -> None: ...

    def holder_present(self, mq: MessageQueue) -> bool:
        """Is the broker that holds ``mq``'s lock (its master) in the route?"""
        ...


class BrokerQueueLocks:
    """:class:`QueueLocks` on the queues' masters (locks live there only)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group

    async def _per_master(self, mqs: list[MessageQueue], *, unlock: bool = False) -> list[Command]:
        """Send a lock/unlock request for ``mqs`` to each of their masters."""
        inst = self.instance
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            by_broker[mq.brokerName].append(mq)
        answers = []
        for broker, queues in by_broker.items():
            addr = inst.broker_addr(broker)
            if addr is None:
                continue
            cmd = broker_api.lock_batch(self.group, inst.client_id, queues, unlock=unlock)
            try:
                answers.append(await inst.rpc.invoke_ok(addr, cmd, LOCK_REQUEST_TIMEOUT))
            except PymqError as exc:
                log.info("lock_request_failed", broker=broker, unlock=unlock, reason=str(exc))
                inst.note_failure(exc)  # a slave or a dead master: the route is refreshed at once
        return answers

    async def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        locked: set[MessageQueue] = set()
        for resp in await self._per_master(mqs):
            locked.update(MessageQueue.from_dict(d) for d in decode_body(resp.body).get(LOCK_OK_MQ_SET, []))
        return locked

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        if mqs:
            await self._per_master(mqs, unlock=True)

    def holder_present(self, mq: MessageQueue) -> bool:
        # A broker name the client has no addresses for is not "away": it is gone for good.
        addrs = self.instance.routes.broker_addrs.get(mq.brokerName)
        return not addrs or MASTER_ID in addrs


class OrderlyConsumeService:
    """A :class:`~pymq.client.consume_service.ConsumeService`: one worker per queue, in order, under a lock."""

    def __init__(self, ctx: ConsumeContext, locks: QueueLocks) -> None:
        self.ctx = ctx
        self.settings = settings = ctx.settings
        self.listener = ctx.listener
        self.locks = locks
        self.clock = ctx.clock
        self.lock_renew_interval = settings.lock_renew_interval
        self.lock_valid_seconds = settings.lock_valid_seconds
        mrt = settings.max_reconsume_times
        self.max_reconsume = DEFAULT_MAX_RECONSUME if mrt is None or mrt < 0 else mrt
        self.clustering = settings.clustering
        self._workers: dict[MessageQueue, asyncio.Task[None]] = {}
        self._renew_task: asyncio.Task[None] | None = None
        self._sem = asyncio.Semaphore(settings.concurrency)
        self.consumed = 0
        self.dead_lettered = 0

    async def start(self) -> None:
        if self.clustering:
            self._renew_task = asyncio.ensure_future(self._renew_loop())

    async def close(self) -> None:
        await cancel_and_wait(self._renew_task)
        # Let each queue finish its current batch; offsets are committed, then the locks released.
        for mq, pq in list(self.ctx.process_queues.items()):
            pq.dropped = True
            await self._wait_worker(mq)
        await self.ctx.persist_offsets()
        if self.clustering:
            await self.unlock(list(self.ctx.process_queues))

    # --- locks ---------------------------------------------------------------------------------------------

    def lock_valid(self, pq: ProcessQueue) -> bool:
        """Broadcasting needs no lock; clustering trusts a lock ``lock_valid_seconds`` after its renewal."""
        return not self.clustering or (
            pq.locked and self.clock.monotonic() - pq.last_lock_time < self.lock_valid_seconds
        )

    async def can_take(self, mq: MessageQueue) -> bool:
        """Rebalance takes a queue only once its lock is held."""
        if not self.clustering:
            return True
        return mq in await self.locks.lock([mq])

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        if mqs and self.clustering:
            await self.locks.unlock(mqs)

    async def after_queue_released(self, mq: MessageQueue) -> None:
        await self.unlock([mq])

    def can_release(self, mq: MessageQueue) -> bool:
        """Not while the master is away: the lock and the offset commit need it, and a new owner
        could not lock the queue anyway. The queue stays, paused (its lock lapses), until then."""
        return not self.clustering or self.locks.holder_present(mq)

    async def _renew_loop(self) -> None:
        while True:
            await self.renew_locks()
            await self.clock.sleep(self.lock_renew_interval)

    async def masters_moved(self, brokers: set[str]) -> None:
        """A new master holds no lock of ours: stop trusting the old ones and lock there now
        (not at the next renewal, up to ``lock_renew_interval`` later)."""
        if not self.clustering:
            return
        pqs = {mq: pq for mq, pq in self.ctx.process_queues.items() if mq.brokerName in brokers}
        for pq in pqs.values():
            pq.locked = False  # a worker finishes its batch and stops until the lock is back
        if not pqs:
            return
        log.info("relocking_on_new_master", group=self.settings.group, brokers=sorted(brokers), queues=len(pqs))
        for _ in range(RELOCK_ATTEMPTS):  # a master just elected may refuse for a moment (still promoting)
            await self.renew_locks(pqs)
            pqs = {mq: pq for mq, pq in pqs.items() if not pq.locked and not pq.dropped}
            if not pqs:
                return
            await self.clock.sleep(RELOCK_RETRY_SECONDS)

    async def renew_locks(self, only: dict[MessageQueue, ProcessQueue] | None = None) -> None:
        pqs = dict(self.ctx.process_queues) if only is None else only
        if not pqs:
            return
        locked = await self.locks.lock(list(pqs))
        now = self.clock.monotonic()
        for mq, pq in pqs.items():
            if mq in locked:
                was = pq.locked
                pq.locked = True
                pq.last_lock_time = now
                if not was and pq.count:
                    self._ensure_worker(mq, pq)
            else:
                pq.locked = False

    # --- consumption ---------------------------------------------------------------------------------------

    def pull_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        if self.clustering and not pq.locked:
            return PULL_DELAY_NOT_LOCKED
        return 0.0

    def queue_taken(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Rebalance took the queue right after locking it (see can_take)."""
        if self.clustering:
            pq.locked = True
            pq.last_lock_time = self.clock.monotonic()

    def submit(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        self._ensure_worker(mq, pq)

    def _ensure_worker(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        task = self._workers.get(mq)
        if task is None or task.done():
            self._workers[mq] = asyncio.ensure_future(self._work(mq, pq))

    async def _wait_worker(self, mq: MessageQueue) -> None:
        task = self._workers.pop(mq, None)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def queue_released(self, mq: MessageQueue, pq: ProcessQueue | None) -> None:
        await self._wait_worker(mq)

    async def _call(self, msgs: list[MessageExt]) -> bool:
        executor = self.ctx.executor
        timeout = self.settings.timeout
        try:
            if executor is not None:
                loop = asyncio.get_running_loop()
                result = await wait_within(loop.run_in_executor(executor, self.listener, msgs), timeout)
            else:
                result = await wait_within(self.listener(msgs), timeout)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("orderly_listener_failed", group=self.settings.group, count=len(msgs))
            return False
        return _is_success(result)

    async def _work(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Consume one queue in order until it is empty, dropped, or its lock lapses."""
        store = self.ctx.offset_store
        batch_size = self.settings.batch_max_size
        while not pq.dropped:
            if not self.lock_valid(pq):
                return  # renewal restarts the worker once the lock is back
            msgs = pq.take_in_order(batch_size)
            if not msgs:
                return
            async with self._sem:
                ok = await self._call(msgs)
            if not ok:
                poison = [m for m in msgs if m.reconsume_times + 1 >= self.max_reconsume]
                for m in msgs:
                    m.reconsume_times += 1
                if poison and await self._dead_letter(poison):
                    msgs = poison  # they leave the queue; the rest are retried in order
                else:
                    await asyncio.sleep(self.settings.suspend_current_queue_time)
                    continue
            else:
                self.consumed += len(msgs)
            offset = pq.remove(msgs)
            # Committed even when the queue was just taken away: we still hold its lock.
            store.update(mq, offset, increase_only=True)

    async def _dead_letter(self, msgs: list[MessageExt]) -> bool:
        group = self.settings.group
        if not self.clustering:
            log.warning("orderly_broadcast_message_dropped", group=group, count=len(msgs))
            return True
        for m in msgs:
            # delay level -1: straight to %DLQ%<group>
            if not await self.ctx.send_back(m, -1, self.max_reconsume):
                return False
            self.dead_lettered += 1
            log.warning("orderly_message_dead_lettered", group=group, msg_id=m.msg_id)
        return True
