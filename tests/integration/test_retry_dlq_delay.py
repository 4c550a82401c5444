"""Reliable consumption: retries with delay levels, dead letters, delayed messages across a restart."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest

from pymq.client import (
    ConsumeFromWhere,
    ConsumeOrderlyResult,
    ConsumeResult,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    SelectByHash,
)
from pymq.testing import LocalCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.integration

# Level L waits L x 100 ms, so retry n (level 3 + n - 1) waits (n + 2) x 100 ms.
LEVELS = " ".join(f"{(i + 1) * 100}ms" for i in range(18))
FAST = {
    "rebalance_interval_seconds": 1.0,
    "heartbeat_interval_seconds": 1.0,
    "persist_offset_interval_seconds": 0.5,
}


@pytest.fixture
async def cluster(tmp_path: Path):
    async with LocalCluster(tmp_path / "c", brokers=1, store={"message_delay_level": LEVELS}) as c:
        await c.create_topic("orders", 4)
        yield c


def consumer(cluster: LocalCluster, group: str, **kw) -> PushConsumer:
    c = PushConsumer(cluster.namesrv_addr, group, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST, **kw)
    c.subscribe("orders")
    return c


async def dead_letters(cluster: LocalCluster, group: str) -> list:
    """Everything in %DLQ%<group> (read directly, the way dlq-list does)."""
    topic = f"%DLQ%{group}"
    if cluster.brokers[0].topics.get(topic) is None:
        return []
    pc = PullConsumer(cluster.namesrv_addr, "dlq-reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue(topic, "broker-a", 0)])
    out = []
    async with pc:
        while batch := await pc.poll(timeout=1.0):
            out.extend(batch)
    return out


async def test_failed_message_retried_with_growing_delays_then_done(cluster: LocalCluster) -> None:
    """A message failing 3 times comes back with reconsumeTimes 1, 2, 3 after the level delays, then never again."""
    deliveries: list[tuple[float, int, str]] = []
    c = consumer(cluster, "retry-g")

    @c.listener
    async def on(msgs):
        m = msgs[0]
        deliveries.append((time.monotonic(), m.reconsume_times, m.topic))
        return ConsumeResult.RECONSUME_LATER if m.reconsume_times < 3 else ConsumeResult.SUCCESS

    async with c, Producer(cluster.namesrv_addr) as p:
        await p.send(Message("orders", b"flaky"))
        await wait_until(lambda: len(deliveries) >= 4, timeout=10, what="4 deliveries")
        await asyncio.sleep(1.0)  # it must not come back after succeeding
    assert [d[1] for d in deliveries] == [0, 1, 2, 3]
    assert {d[2] for d in deliveries} == {"orders"}  # the listener sees the original topic
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(deliveries)]
    for n, gap in enumerate(gaps, start=1):
        expected = (n + 2) * 0.1  # level 3 + reconsumeTimes
        assert expected - 0.02 <= gap <= expected + 0.6, (n, gap, gaps)
    assert await dead_letters(cluster, "retry-g") == []


async def test_always_failing_message_goes_to_dlq(cluster: LocalCluster) -> None:
    """After maxReconsumeTimes the message lands in %DLQ%<group> and is never delivered again."""
    deliveries: list[int] = []
    c = consumer(cluster, "dlq-g", max_reconsume_times=3)

    @c.listener
    async def on(msgs):
        deliveries.append(msgs[0].reconsume_times)
        raise RuntimeError("poison")

    async with c, Producer(cluster.namesrv_addr) as p:
        sent = await p.send(Message("orders", b"poison", keys=["order-42"]))
        await wait_until(lambda: len(deliveries) >= 4, timeout=10, what="4 deliveries")
        await asyncio.sleep(1.5)
    assert deliveries == [0, 1, 2, 3]
    dlq = await dead_letters(cluster, "dlq-g")
    assert len(dlq) == 1 and dlq[0].body == b"poison" and dlq[0].msg_id == sent.msg_id
    assert dlq[0].properties.get("RETRY_TOPIC") == "orders" and dlq[0].keys == ["order-42"]


async def test_orderly_poison_message_dead_lettered_and_queue_continues(cluster: LocalCluster) -> None:
    """A poison message in an orderly queue ends in the DLQ after maxReconsumeTimes; later messages follow in order."""
    seen: list[bytes] = []
    attempts: list[int] = []
    c = consumer(cluster, "ord-g", max_reconsume_times=3, suspend_current_queue_time=0.05)

    @c.orderly_listener
    async def on(msgs):
        m = msgs[0]
        if m.body == b"step-2":
            attempts.append(m.reconsume_times)
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        seen.append(m.body)
        return ConsumeOrderlyResult.SUCCESS

    async with c, Producer(cluster.namesrv_addr) as p:
        for i in range(5):
            await p.send(Message("orders", f"step-{i}".encode()), selector=SelectByHash(), arg="order-1")
        await wait_until(lambda: len(seen) >= 4, timeout=10, what="the queue to move past the poison")
    assert seen == [b"step-0", b"step-1", b"step-3", b"step-4"]
    assert attempts == [0, 1, 2]
    dlq = await dead_letters(cluster, "ord-g")
    assert [m.body for m in dlq] == [b"step-2"]


async def test_delayed_messages_survive_broker_restart(tmp_path: Path) -> None:
    """Delayed messages scheduled before a broker restart arrive after it, on time within a second, none lost."""
    levels = "1s 2s 3s 4s 5s"
    async with LocalCluster(tmp_path / "c", brokers=1, store={"message_delay_level": levels}) as cluster:
        await cluster.create_topic("orders", 2)
        due: dict[str, float] = {}
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(20):
                level = 2 + i % 4  # 2 to 5 seconds
                r = await p.send(Message("orders", f"d{i}".encode(), delay_level=level))
                due[r.msg_id] = time.time() + level
        old = cluster.brokers[0]
        config = old.config
        await cluster.stop_broker(old)  # graceful stop, then the same store comes back
        await asyncio.sleep(0.5)
        await cluster.add_broker(0, store={"store_dir": str(config.store.store_dir), "message_delay_level": levels})
        arrived: dict[str, float] = {}
        c = PushConsumer(cluster.namesrv_addr, "delay-g", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)
        c.subscribe("orders")

        @c.listener
        async def on(msgs):
            for m in msgs:
                arrived.setdefault(m.msg_id, time.time())

        async with c:
            await wait_until(lambda: len(arrived) >= 20, timeout=15, what="all 20 delayed messages")
    assert set(arrived) == set(due)
    for msg_id, t in arrived.items():
        assert due[msg_id] - 0.05 <= t <= due[msg_id] + 1.0, t - due[msg_id]
