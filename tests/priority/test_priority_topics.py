"""Priority topics on an in-process cluster: backlog highest first, FIFO within a priority, no starvation."""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import time
from pathlib import Path

import pytest

from pymq.broker.priority import PRIORITY_ATTRIBUTE, level_topic
from pymq.client import ConsumeFromWhere, ConsumeResult, Message, MessageQueue, Producer, PullConsumer, PushConsumer
from pymq.protocol.message import MessageExt, Prop
from pymq.testing import LocalCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.integration
_groups = itertools.count()
LEVELS = {PRIORITY_ATTRIBUTE: "10"}


async def pull_all(cluster: LocalCluster, topic: str, want: int, timeout: float = 15.0) -> list[MessageExt]:
    pc = PullConsumer(cluster.namesrv_addr, f"g{next(_groups)}", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue(topic, "broker-a", 0)])
    out: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    async with pc:
        while len(out) < want and time.monotonic() < deadline:
            out.extend(await pc.poll(timeout=0.5))
    return out


def check_priority_order(got: list[MessageExt]) -> None:
    """Non-increasing priority; within one priority, the send order (the body's sequence number)."""
    keys = [(-int(m.properties[Prop.PRIORITY]), int(m.body)) for m in got]
    assert keys == sorted(keys)


async def test_backlog_is_consumed_highest_priority_first_fifo_within_a_priority(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"priority_max_wait_ms": 120_000}) as cluster:
        await cluster.create_topic("tasks", 1, attributes=LEVELS)
        rng = random.Random(7)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(120):
                await p.send(Message("tasks", str(i).encode()).set_priority(rng.randrange(10)))
            await p.send(Message("tasks", b"120"))  # no priority: level 0
            await p.send(Message("tasks", b"121").set_priority(42))  # above the top: level 9
        assert cluster.brokers[0].store.max_offset("tasks", 0) == 0  # all waiting in level queues
        got = await pull_all(cluster, "tasks", 122)
        assert len(got) == 122
        for m in got:
            m.properties.setdefault(Prop.PRIORITY, "0")
        got[[m.body for m in got].index(b"121")].properties[Prop.PRIORITY] = "9"
        check_priority_order(got)
        assert got[-1].body == b"120" or int(got[-1].properties[Prop.PRIORITY]) == 0


async def test_push_consumer_gets_priorities_and_new_messages_while_waiting(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"priority_max_wait_ms": 120_000}) as cluster:
        await cluster.create_topic("tasks", 1, attributes=LEVELS)
        async with Producer(cluster.namesrv_addr) as p:
            for i, prio in enumerate([1, 5, 1, 9, 5, 0, 9]):
                await p.send(Message("tasks", str(i).encode()).set_priority(prio))
            got: list[MessageExt] = []
            c = PushConsumer(cluster.namesrv_addr, "workers", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
            c.subscribe("tasks")

            @c.listener
            async def on(msgs):
                got.extend(msgs)
                return ConsumeResult.SUCCESS

            async with c:
                await wait_until(lambda: len(got) == 7, timeout=20, what="the backlog")
                # the queue order (listeners may run concurrently)
                in_queue = sorted(got, key=lambda m: m.queue_offset)
                assert [m.body for m in in_queue] == [b"3", b"6", b"1", b"4", b"0", b"2", b"5"]
                # the consumer now waits on an empty queue: a new message is moved and delivered at once
                await p.send(Message("tasks", b"late").set_priority(3))
                await wait_until(lambda: len(got) == 8, timeout=10, what="the message sent while waiting")
        assert got[-1].body == b"late"


async def test_a_low_priority_message_is_not_starved(tmp_path: Path) -> None:
    """Once it waited priority_max_wait_ms, a level-0 message moves before younger level-9 ones."""
    async with LocalCluster(tmp_path / "c", broker={"priority_max_wait_ms": 300}) as cluster:
        await cluster.create_topic("tasks", 1, attributes=LEVELS)
        async with Producer(cluster.namesrv_addr) as p:
            await p.send(Message("tasks", b"0").set_priority(0))
            store = cluster.brokers[0].store
            first = store.store_time_at(level_topic("tasks"), 0, 0)
            await wait_until(lambda: time.time() * 1000 > first + 400, what="the low one to age")
            for i in range(1, 40):
                await p.send(Message("tasks", str(i).encode()).set_priority(9))
        got = await pull_all(cluster, "tasks", 40)
        assert got[0].body == b"0"
        assert [int(m.body) for m in got[1:]] == list(range(1, 40))  # then FIFO (some aged too, all one level)


async def test_priority_order_and_progress_survive_a_restart(tmp_path: Path) -> None:
    """Half the backlog consumed, broker restarted: the rest still comes highest first, nothing moved twice."""
    async with LocalCluster(tmp_path / "c", broker={"priority_max_wait_ms": 120_000}) as cluster:
        await cluster.create_topic("tasks", 1, attributes=LEVELS)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(64):
                await p.send(Message("tasks", str(i).encode()).set_priority(i % 4))
        first = await pull_all(cluster, "tasks", 32)  # one refill's worth: the 16 of level 3, then level 2
        assert len(first) == 32
        await cluster.stop_broker(cluster.brokers[0])
        await cluster.add_broker(0)
        await cluster.wait_for_route("tasks", 1)
        got = await pull_all(cluster, "tasks", 65, timeout=4)
        assert len(got) == 64 and len({m.body for m in got}) == 64
        check_priority_order(got)
        assert [int(m.properties[Prop.PRIORITY]) for m in got[:32]] == [3] * 16 + [2] * 16


async def test_admin_creates_a_priority_topic(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster:
        cmd = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", cluster.namesrv_addr, "topic-create"]
        args = ("--topic", "tasks", "--queues", "2", "--attribute", "priority.levels=5")
        ok = await asyncio.create_subprocess_exec(*cmd, *args, stderr=asyncio.subprocess.PIPE)
        assert await ok.wait() == 0
        tc = cluster.brokers[0].topics.get("tasks")
        assert tc is not None and tc.attributes == {"priority.levels": "5"}
        bad = await asyncio.create_subprocess_exec(
            *cmd, "--topic", "t2", "--attribute", "nonsense", stderr=asyncio.subprocess.PIPE
        )
        _, err = await bad.communicate()
        assert bad.returncode == 2 and b"KEY=VALUE" in err


async def test_timer_messages_on_a_priority_topic_enter_their_level_when_due(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"priority_max_wait_ms": 120_000}) as cluster:
        await cluster.create_topic("tasks", 1, attributes=LEVELS)
        before = int(time.time() * 1000)
        async with Producer(cluster.namesrv_addr) as p:
            await p.send_delayed(Message("tasks", b"0").set_priority(9), delay_ms=800)
            for i in range(1, 4):
                await p.send(Message("tasks", str(i).encode()).set_priority(1))
        timer = cluster.brokers[0].timer
        assert timer is not None
        await wait_until(lambda: timer.delivered == 1, what="the timer's delivery")
        got = await pull_all(cluster, "tasks", 4)
        assert [m.body for m in got] == [b"0", b"1", b"2", b"3"]  # level 9 first, once due
        assert got[0].store_timestamp >= before + 800


async def test_simple_consumer_receives_highest_priority_first(tmp_path: Path) -> None:
    """Pop reads refill a priority topic's queue like pulls do (the pop handler's before_read hook)."""
    from pymq.client import SimpleConsumer

    async with LocalCluster(tmp_path / "c", broker={"priority_max_wait_ms": 120_000}) as cluster:
        await cluster.create_topic("tasks", 1, attributes=LEVELS)
        async with Producer(cluster.namesrv_addr) as p:
            for i, prio in enumerate([1, 5, 1, 9, 5, 0, 9]):
                await p.send(Message("tasks", str(i).encode()).set_priority(prio))
        got: list[MessageExt] = []
        async with SimpleConsumer(cluster.namesrv_addr, "pop-workers") as c:
            c.subscribe("tasks")
            deadline = time.monotonic() + 20
            while len(got) < 7 and time.monotonic() < deadline:
                for m in await c.receive(4, 30.0, 1.0):
                    got.append(m)
                    await c.ack(m)
        assert [m.body for m in got] == [b"3", b"6", b"1", b"4", b"0", b"2", b"5"]


async def test_send_result_names_the_topics_own_queue_not_a_level_queue(tmp_path: Path) -> None:
    """A send to a 4-queue priority topic answers with one of its 4 queues (the level queues are internal);
    so does a batch, and a delayed send to a plain topic."""
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("tasks", 4, attributes=LEVELS)
        await cluster.create_topic("plain", 4)
        async with Producer(cluster.namesrv_addr) as p:
            results = [await p.send(Message("tasks", str(i).encode()).set_priority(9)) for i in range(8)]
            results.append(await p.send_batch([Message("tasks", b"b1").set_priority(5), Message("tasks", b"b2")]))
            results.append(await p.send(Message("plain", b"later", delay_level=3)))
        for r in results:
            assert r.message_queue.topic in ("tasks", "plain") and r.message_queue.brokerName == "broker-a"
            assert 0 <= r.message_queue.queueId < 4, r.message_queue
        assert {r.message_queue.queueId for r in results[:8]} == {0, 1, 2, 3}  # round robin over the topic's queues


async def test_under_an_aged_backlog_most_of_each_refill_still_goes_by_priority(tmp_path: Path) -> None:
    """A backlog of level-0 messages older than priority_max_wait_ms takes only priority_aged_share (a quarter)
    of each refill: top-priority messages sent during the backlog are not queued behind all of it."""
    async with LocalCluster(tmp_path / "c", broker={"priority_max_wait_ms": 300}) as cluster:
        await cluster.create_topic("tasks", 1, attributes=LEVELS)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(100):
                await p.send(Message("tasks", f"old-{i}".encode()).set_priority(0))
            store = cluster.brokers[0].store
            last = store.store_time_at(level_topic("tasks"), 0, 99)
            await wait_until(lambda: time.time() * 1000 > last + 400, what="the backlog to age")
            for i in range(40):
                await p.send(Message("tasks", f"top-{i}".encode()).set_priority(9))
        got = [m.body.decode() for m in await pull_all(cluster, "tasks", 140)]
        assert len(got) == 140
        first = got[:32]  # the first refill (priority_refill_batch)
        assert first[:8] == [f"old-{i}" for i in range(8)]  # the aged share, oldest first: the backlog moves on
        assert first[8:] == [f"top-{i}" for i in range(24)]  # the rest by priority
        assert [b for b in got if b.startswith("old-")] == [f"old-{i}" for i in range(100)]  # none lost, FIFO
