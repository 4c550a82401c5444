"""Timers driven by pymq.testing.FakeClock: lock expiry, the rebalance schedule, orderly lock validity. No sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

from pymq.broker.locks import QueueLockManager
from pymq.client.client_config import ClientConfig
from pymq.client.consume_orderly import OrderlyConsumeService
from pymq.client.consume_service import ConsumeContext, ConsumeSettings
from pymq.client.instance import ClientInstance
from pymq.client.offset_store import OffsetStore
from pymq.client.process_queue import ProcessQueue
from pymq.protocol.message import MessageExt
from pymq.protocol.route import MessageQueue
from pymq.testing import FakeClock

Q0 = MessageQueue("orders", "broker-a", 0)
Q1 = MessageQueue("orders", "broker-a", 1)


async def test_fake_sleep_wakes_only_when_time_is_advanced() -> None:
    clock = FakeClock()
    woke: list[float] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(clock.monotonic())

    tasks = [asyncio.ensure_future(sleeper(s)) for s in (5, 10)]
    await clock.run_for(0)
    assert woke == [] and clock.sleepers == 2
    await clock.run_for(5)
    assert woke == [1005.0]
    await clock.run_for(5)
    assert woke == [1005.0, 1010.0]
    await asyncio.gather(*tasks)
    assert clock.time_ms() == 1_700_000_000_000 + 10_000


def test_broker_queue_lock_expires_on_the_clock() -> None:
    clock = FakeClock()
    locks = QueueLockManager(60, clock)
    assert locks.try_lock_batch("g", [Q0, Q1], "c1") == {Q0, Q1}
    clock.advance(59)
    assert locks.try_lock_batch("g", [Q0], "c1") == {Q0}  # renews Q0 only
    assert locks.try_lock_batch("g", [Q0, Q1], "c2") == set()
    clock.advance(2)
    assert locks.holder("g", Q1) is None and locks.holder("g", Q0) == "c1"
    assert locks.try_lock_batch("g", [Q0, Q1], "c2") == {Q1}


class Member:
    """A consumer as the instance sees it, counting the rebalances it is asked for."""

    group = "g"

    def __init__(self) -> None:
        self.rebalances = 0
        self.persists = 0

    def heartbeat_data(self) -> dict[str, Any] | None:
        return None

    def topics_of_interest(self) -> list[str]:
        return []

    async def rebalance(self) -> None:
        self.rebalances += 1

    async def persist_offsets(self) -> None:
        self.persists += 1

    def reset_offsets(self, table: dict[MessageQueue, int]) -> None:
        return None


async def test_instance_rebalances_on_its_clock_and_when_triggered() -> None:
    clock = FakeClock()
    inst = ClientInstance(ClientConfig(namesrv_addrs=["127.0.0.1:1"]), "cid", clock)
    member = Member()
    inst.consumers["g"] = member
    await inst.start()
    try:
        await clock.run_for(0)  # the periodic tasks start and wait on the clock
        await clock.run_for(19)
        assert member.rebalances == 0
        await clock.run_for(1)
        assert member.rebalances == 1  # every rebalance_interval_seconds (20 s)
        inst.trigger_rebalance()  # e.g. NOTIFY_CONSUMER_IDS_CHANGED
        await clock.run_for(0)
        assert member.rebalances == 2
        await clock.run_for(20)
        assert member.rebalances == 3  # the schedule restarted at the triggered rebalance
        assert member.persists > 0  # offset persistence runs on the same clock
    finally:
        inst._refs = 1
        await inst.release()


class MemoryOffsets(OffsetStore):
    async def read(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    async def persist(self, mqs: list[MessageQueue]) -> None:
        return None


class Locks:
    def __init__(self) -> None:
        self.held: set[MessageQueue] = set()

    async def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        return {mq for mq in mqs if mq in self.held}

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        return None

    def holder_present(self, mq: MessageQueue) -> bool:
        return True


def orderly_service(clock: FakeClock, pqs: dict[MessageQueue, ProcessQueue], locks: Locks) -> OrderlyConsumeService:
    settings = ConsumeSettings(
        group="g",
        clustering=True,
        concurrency=1,
        batch_max_size=1,
        max_span=2000,
        max_reconsume_times=None,
        timeout=60,
        suspend_current_queue_time=1,
        lock_renew_interval=20,
        lock_valid_seconds=30,
    )

    async def listener(msgs: list[MessageExt]) -> None:
        return None

    async def send_back(msg: MessageExt, delay_level: int, max_times: int | None) -> bool:
        return True

    async def persist() -> None:
        return None

    ctx = ConsumeContext(settings, listener, None, pqs, MemoryOffsets(), send_back, persist, clock)
    return OrderlyConsumeService(ctx, locks)


async def test_orderly_lock_is_trusted_for_lock_valid_seconds_after_renewal() -> None:
    clock = FakeClock()
    pq = ProcessQueue(clock)
    locks = Locks()
    locks.held.add(Q0)
    service = orderly_service(clock, {Q0: pq}, locks)
    assert await service.can_take(Q0) and not await service.can_take(Q1)
    service.queue_taken(Q0, pq)
    assert service.lock_valid(pq) and service.pull_delay(Q0, pq) == 0
    clock.advance(29.9)
    assert service.lock_valid(pq)
    clock.advance(0.2)
    assert not service.lock_valid(pq)  # not renewed within 30 s: stop consuming this queue
    await service.renew_locks()
    assert service.lock_valid(pq)  # renewed
    locks.held.clear()
    await service.renew_locks()
    assert not pq.locked and service.pull_delay(Q0, pq) > 0  # lost: pulling waits for the lock
