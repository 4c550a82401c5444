"""Reliable consumption: retries with delay levels, dead letters, delayed messages across a restart."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
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


#: Delay levels for the restart test; level L waits DELAY_S[L - 1] seconds.
DELAY_S = [1, 2, 3, 6, 8]
#: a delayed message must reach the consumer within this long after it falls due
ON_TIME_SLACK = 1.0


async def test_delayed_messages_survive_broker_restart(tmp_path: Path) -> None:
    """Delayed messages scheduled before a broker restart arrive after it, on time within a second, none lost.

    Timeline (t0 = first send): levels 1 s, 2 s, 3 s, 6 s, 8 s, four messages each, plus four
    more at level 3 sent at t0 + 2.5 s. The 1 s, 2 s and first 3 s messages are delivered
    while the broker runs; it is then stopped (delayOffset.json must record how far each
    level got: all of levels 1 and 2, half of level 3, nothing of 4 and 5) and started again
    on the same store before the next message falls due (t0 + 5.5 s). Everything is
    received exactly once, by a consumer before the restart or a new one after it, never
    before its due time and at most ON_TIME_SLACK after it.
    """
    levels = " ".join(f"{s}s" for s in DELAY_S)
    per_level = 4
    async with LocalCluster(tmp_path / "c", brokers=1, store={"message_delay_level": levels}) as cluster:
        await cluster.create_topic("orders", 2)
        deliveries: list[tuple[str, float]] = []  # (msg id, wall-clock arrival), every delivery

        def delay_consumer() -> PushConsumer:
            c = PushConsumer(cluster.namesrv_addr, "delay-g", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)
            c.subscribe("orders")

            @c.listener
            async def on(msgs):
                now = time.time()
                deliveries.extend((m.msg_id, now) for m in msgs)

            return c

        # msg id -> (level, earliest due, latest due): the broker counts from the store time,
        # which lies between the start and the end of the send.
        due: dict[str, tuple[int, float, float]] = {}

        async def send(p: Producer, level: int, n: int) -> None:
            for i in range(n):
                t_send = time.time()
                r = await p.send(Message("orders", f"L{level}-{i}".encode(), delay_level=level))
                delay = DELAY_S[level - 1]
                due[r.msg_id] = (level, t_send + delay, time.time() + delay)

        first = delay_consumer()
        await first.start()
        await wait_until(lambda: len(first.assigned_queues()) >= 2, what="consumer owns the queues")
        async with Producer(cluster.namesrv_addr) as p:
            t0 = time.time()
            for level in range(1, len(DELAY_S) + 1):
                await send(p, level, per_level)
            await asyncio.sleep(max(0.0, t0 + 2.5 - time.time()))
            await send(p, 3, per_level)  # due at t0 + 5.5 s: after the restart
        before_restart = {m for m, (_lvl, _lo, hi) in due.items() if hi < t0 + 3.5}
        assert len(before_restart) == 3 * per_level, "the first sends took too long for this timeline"
        await wait_until(
            lambda: {m for m, _ in deliveries} >= before_restart, timeout=10, what="messages due before the restart"
        )
        path = Path(cluster.brokers[0].config.store.store_dir) / "config" / "delayOffset.json"
        # Progress is persisted while the broker runs (every second), not only at shutdown.
        await wait_until(lambda: path.exists() and "1" in json.loads(path.read_text())["offsetTable"], timeout=5)
        await first.close()
        t_down = time.time()
        await cluster.stop_broker(cluster.brokers[0])  # graceful stop
        progress = json.loads(path.read_text())["offsetTable"]
        assert {int(k): v for k, v in progress.items() if v} == {1: per_level, 2: per_level, 3: per_level}, progress
        await asyncio.sleep(0.3)
        await cluster.add_broker(0)  # the same store directory and levels
        t_up = time.time()
        after_restart = set(due) - before_restart
        next_due = min(due[m][1] for m in after_restart)
        assert t_up < next_due - 0.5, f"restart took too long for this timeline ({t_up - t_down:.1f}s down)"
        second = delay_consumer()
        async with second:
            await wait_until(lambda: {m for m, _ in deliveries} >= set(due), timeout=15, what="every delayed message")
            await asyncio.sleep(0.5)  # a duplicate would show up here
    counts = Counter(m for m, _ in deliveries)
    assert set(counts) == set(due), "lost or unexpected messages"
    assert [m for m, n in counts.items() if n > 1] == [], "delivered more than once"
    arrived = dict(deliveries)
    assert {m for m in due if arrived[m] < t_down} == before_restart
    assert all(arrived[m] > t_up for m in after_restart)
    lateness = {m: arrived[m] - due[m][2] for m in due}
    for m, (level, earliest, latest) in due.items():
        assert arrived[m] >= earliest - 0.002, f"level {level} message {m} delivered {earliest - arrived[m]:.3f}s early"
        assert arrived[m] <= latest + ON_TIME_SLACK, f"level {level} message {m} {lateness[m]:.3f}s late"
    print(f"max lateness {max(lateness.values()):.3f}s; restart took {t_up - t_down:.2f}s")


async def test_retries_published_by_the_client_when_send_back_fails(cluster: LocalCluster) -> None:
    """Send-back refused: the client publishes retries to %RETRY% itself; past the limit the broker dead-letters."""
    from pymq.protocol.codes import RequestCode, ResponseCode

    broker = cluster.brokers[0]
    refused: list[int] = []

    def refuse(cmd, conn):
        refused.append(1)
        return cmd.response(ResponseCode.SYSTEM_ERROR, "send back refused by the test")

    broker.dispatcher.register(RequestCode.CONSUMER_SEND_MSG_BACK, refuse)
    deliveries: list[tuple[int, str]] = []
    c = consumer(cluster, "fallback-g", max_reconsume_times=2)

    @c.listener
    async def on(msgs):
        deliveries.append((msgs[0].reconsume_times, msgs[0].topic))
        return ConsumeResult.RECONSUME_LATER

    async with c, Producer(cluster.namesrv_addr) as p:
        sent = await p.send(Message("orders", b"always-fails"))
        await wait_until(lambda: len(deliveries) >= 3, timeout=10, what="3 deliveries")
        await wait_until(
            lambda: broker.topics.get("%DLQ%fallback-g") is not None, timeout=5, what="the dead-letter topic"
        )
        await asyncio.sleep(1.0)  # and no fourth delivery
    assert deliveries == [(0, "orders"), (1, "orders"), (2, "orders")]
    assert len(refused) == 3  # every failure tried the broker's send-back first
    dlq = await dead_letters(cluster, "fallback-g")
    assert [(m.body, m.msg_id, m.reconsume_times) for m in dlq] == [(b"always-fails", sent.msg_id, 3)]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_consume_timeout_retries_only_the_unfinished_part_of_a_batch(cluster: LocalCluster, kind: str) -> None:
    """A listener call past consume_timeout sends back what it had not finished; slices done before stay done."""
    deliveries: list[tuple[bytes, int]] = []
    c = consumer(cluster, f"timeout-{kind}", consume_timeout=0.5, consume_batch_max_size=1)

    def record(msgs) -> bool:
        m = msgs[0]
        deliveries.append((m.body, m.reconsume_times))
        return m.body == b"slow" and m.reconsume_times == 0

    if kind == "async":

        @c.listener
        async def on(msgs):
            if record(msgs):
                await asyncio.sleep(5)  # past the timeout: cancelled, sent back
            return ConsumeResult.SUCCESS

    else:  # a blocking listener runs on the thread pool; the thread cannot be cancelled

        @c.listener
        def on_sync(msgs):
            if record(msgs):
                time.sleep(1.5)  # past the timeout: the rest of the batch is not started
            return ConsumeResult.SUCCESS

    async with Producer(cluster.namesrv_addr) as p:
        for body in (b"fast-1", b"slow", b"fast-2"):  # one queue, so one pulled batch
            await p.send(Message("orders", body), selector=SelectByHash(), arg="one-queue")
    async with c:
        await wait_until(lambda: (b"slow", 1) in deliveries, timeout=10, what="the slow message's retry")
        await wait_until(lambda: any(b == b"fast-2" for b, _ in deliveries), timeout=10, what="fast-2")
        await asyncio.sleep(1.0)  # nothing else comes back
    counts = Counter(b for b, _ in deliveries)
    assert counts[b"fast-1"] == 1, deliveries  # finished before the timeout: not redelivered
    assert counts[b"slow"] == 2 and (b"slow", 1) in deliveries
    # never started before the timeout: sent back with the slow one, then delivered once
    assert [d for d in deliveries if d[0] == b"fast-2"] == [(b"fast-2", 1)]
