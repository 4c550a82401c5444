"""Producers and consumers against an in-process cluster: one nameserver, two brokers, 4 queues each."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from pymq.broker.subscription_groups import SubscriptionGroupConfig
from pymq.client import (
    ConsumeFromWhere,
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    PushConsumer,
)
from pymq.testing import LocalCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.integration

FAST = {
    "rebalance_interval_seconds": 1.0,
    "heartbeat_interval_seconds": 1.0,
    "persist_offset_interval_seconds": 0.5,
}


@pytest.fixture
async def cluster(tmp_path: Path):
    async with LocalCluster(tmp_path / "c", brokers=2) as c:
        await c.create_topic("orders", 4)
        yield c


def push_consumer(
    cluster: LocalCluster, group: str, name: str, sink: list, *, client: dict | None = None, **kw
) -> PushConsumer:
    c = PushConsumer(
        cluster.namesrv_addr,
        group,
        instance_name=name,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **(FAST if client is None else client),
        **kw,
    )
    c.subscribe("orders", kw.pop("expression", "*") if "expression" in kw else "*")

    @c.listener
    async def on(msgs):
        sink.extend((name, m) for m in msgs)

    return c


def owners(consumers: list[PushConsumer]) -> Counter:
    return Counter(mq for c in consumers for mq in c.assigned_queues() if mq.topic == "orders")


async def produce_until(cluster: LocalCluster, stop: asyncio.Event, sent: list[str]) -> None:
    """Send to "orders" every 5 ms until ``stop`` is set, appending each msg id to ``sent``."""
    async with Producer(cluster.namesrv_addr) as p:
        i = 0
        while not stop.is_set():
            sent.append((await p.send(Message("orders", f"m{i}".encode()))).msg_id)
            i += 1
            await asyncio.sleep(0.005)


async def test_each_message_consumed_once_by_one_of_three(cluster: LocalCluster) -> None:
    """A message sent is consumed exactly once by exactly one of three push consumers in a group."""
    seen: list = []
    consumers = [push_consumer(cluster, "g", f"c{i}", seen) for i in range(3)]
    for c in consumers:
        await c.start()
    try:
        await wait_until(lambda: sum(owners(consumers).values()) == 8, what="8 queues owned")
        async with Producer(cluster.namesrv_addr) as p:
            ids = [(await p.send(Message("orders", f"m{i}".encode()))).msg_id for i in range(60)]
        await wait_until(lambda: len(seen) >= 60, what="60 deliveries")
        await asyncio.sleep(0.3)  # nothing more may arrive
        counts = Counter(m.msg_id for _, m in seen)
        assert sorted(counts) == sorted(ids) and set(counts.values()) == {1}
        assert len({name for name, _ in seen}) >= 2  # the work is shared
    finally:
        for c in consumers:
            await c.close()


async def test_join_and_leave_rebalances_without_loss(cluster: LocalCluster) -> None:
    """Consumers joining and leaving: each queue has exactly one owner within a rebalance interval; nothing is lost."""
    seen: list = []
    first = push_consumer(cluster, "g", "c0", seen)
    await first.start()
    members = [first]
    sent: list[str] = []
    stop = asyncio.Event()

    producer = asyncio.ensure_future(produce_until(cluster, stop, sent))
    try:
        for name in ("c1", "c2"):
            await asyncio.sleep(0.5)
            c = push_consumer(cluster, "g", name, seen)
            await c.start()
            members.append(c)
            await wait_until(
                lambda: (
                    owners(members) == Counter({mq: 1 for mq in owners(members)})
                    and len(owners(members)) == 8
                    and all(m.assigned_queues() for m in members)
                ),
                timeout=3.0,
                what="one owner per queue after join",
            )
        leaving = members.pop(1)
        await leaving.close()
        await wait_until(
            lambda: len(owners(members)) == 8 and set(owners(members).values()) == {1},
            timeout=3.0,
            what="one owner per queue after leave",
        )
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await producer
    try:
        await wait_until(lambda: {m.msg_id for _, m in seen} >= set(sent), timeout=10, what="every sent message")
    finally:
        for c in members:
            await c.close()


#: The periodic rebalance is out of reach of these tests (60 s, longer than they run): only the
#: broker's NOTIFY_CONSUMER_IDS_CHANGED push (and a joiner's own start) can move queues.
NO_TIMER = {**FAST, "rebalance_interval_seconds": 60.0}
#: how long after a membership change every queue must have exactly one owner
NOTIFY_DEADLINE = 5.0


def one_owner_each(members: list[PushConsumer]) -> bool:
    o = owners(members)
    return len(o) == 8 and set(o.values()) == {1} and all(m.assigned_queues() for m in members)


def owner_map(members: list[PushConsumer]) -> dict:
    return {mq: m for m in members for mq in m.assigned_queues() if mq.topic == "orders"}


async def test_notify_alone_rebalances_on_join_and_leave_without_loss(cluster: LocalCluster) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED, not the timer, hands queues over on join and leave; nothing is lost.

    The periodic rebalance is 60 s, so an existing member can only give queues up because the
    broker pushed NOTIFY_CONSUMER_IDS_CHANGED (a joiner rebalances by itself when it starts).
    Within NOTIFY_DEADLINE of each join and of a leave every queue has exactly one owner.

    Duplicates: on a join the newcomer takes its queues at once from the group's committed
    offset, while the previous owner commits its progress only when it releases them (or
    every 0.5 s), so a moved queue may be re-delivered from the last commit (at least once,
    as in RocketMQ): allowed, but only on queues that changed hands at a join. A clean leave
    commits every offset before it unregisters (which is what makes the broker notify), so
    the members taking over the leaver's queues start exactly where it stopped: no
    duplicates at all from the leave on.
    """
    seen: list = []  # (consumer, MessageExt) in delivery order
    first = push_consumer(cluster, "ng", "c0", seen, client=NO_TIMER)
    await first.start()
    members = [first]
    assert len(owners(members)) == 8
    sent: list[str] = []
    stop = asyncio.Event()

    moved_at_join: set[tuple[str, int]] = set()
    producer = asyncio.ensure_future(produce_until(cluster, stop, sent))
    try:
        for name in ("c1", "c2"):
            await asyncio.sleep(0.5)
            before = owner_map(members)
            c = push_consumer(cluster, "ng", name, seen, client=NO_TIMER)
            await c.start()
            members.append(c)
            t0 = time.monotonic()
            await wait_until(lambda: one_owner_each(members), timeout=NOTIFY_DEADLINE, what=f"one owner after {name}")
            print(f"join {name}: one owner per queue after {time.monotonic() - t0:.3f}s")
            after = owner_map(members)
            moved_at_join |= {(mq.brokerName, mq.queueId) for mq in after if after[mq] is not before.get(mq)}
        await asyncio.sleep(1.0)  # re-deliveries caused by the joins are over
        before = owner_map(members)
        leaving = members.pop(1)
        t_leave = time.monotonic()
        leave_index = len(seen)  # deliveries from here on happen after the leave began
        await leaving.close()
        await wait_until(lambda: one_owner_each(members), timeout=NOTIFY_DEADLINE, what="one owner after leave")
        print(f"leave: one owner per queue after {time.monotonic() - t_leave:.3f}s")
        after = owner_map(members)
        # Only the leaver's queues moved: the survivors kept theirs.
        assert all(after[mq] is owner for mq, owner in before.items() if owner is not leaving), "survivor queue moved"
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await producer
    try:
        await wait_until(lambda: {m.msg_id for _, m in seen} >= set(sent), timeout=10, what="every sent message")
        await asyncio.sleep(0.5)  # late duplicates would show up here
    finally:
        for c in members:
            await c.close()
    assert {m.msg_id for _, m in seen} == set(sent), "delivered something never sent"
    first_seen: set[str] = set()
    join_dups = leave_dups = 0
    for i, (_name, m) in enumerate(seen):
        if m.msg_id not in first_seen:
            first_seen.add(m.msg_id)
            continue
        if i >= leave_index:
            leave_dups += 1
        else:
            queue = (m.broker_name, m.queue_id)
            assert queue in moved_at_join, f"{m.msg_id} re-delivered on {queue}, which did not change hands"
            join_dups += 1
    print(f"{len(sent)} sent, {len(seen)} deliveries, duplicates: {join_dups} at joins, {leave_dups} at leave")
    assert leave_dups == 0, f"{leave_dups} duplicates after a clean leave"


async def test_without_notify_existing_members_keep_their_queues(cluster: LocalCluster) -> None:
    """Control for the test above: with the group's notifications off, the old member never gives queues up.

    This shows that in the test above nothing but NOTIFY_CONSUMER_IDS_CHANGED made the first
    consumer release its queues in time (the joiner takes its share either way).
    """
    for b in cluster.brokers:
        b.subscription_groups.upsert(SubscriptionGroupConfig("quiet", notifyConsumerIdsChangedEnable=False))
    first = push_consumer(cluster, "quiet", "q0", [], client=NO_TIMER)
    second = push_consumer(cluster, "quiet", "q1", [], client=NO_TIMER)
    await first.start()
    await asyncio.sleep(0.5)  # the rebalance its own start triggered is over
    try:
        await second.start()
        try:
            assert len(owners([second])) == 4  # the joiner took its share by itself
            await asyncio.sleep(NOTIFY_DEADLINE / 2)
            assert len(owners([first])) == 8, "rebalanced without a notification"
            assert not one_owner_each([first, second])
        finally:
            await second.close()
    finally:
        await first.close()


async def test_close_during_a_notified_rebalance_leaves_no_pull_running(cluster: LocalCluster) -> None:
    """Closing a consumer while a NOTIFY-triggered rebalance is taking queues stops every pull it started.

    When one member leaves, the broker notifies the other, whose rebalance starts taking the
    freed queues; closing that member right then must wait for the rebalance, not leave
    pull tasks running after close() (they would fail with 'consumer is closed').
    """
    leaked = []
    for i in range(5):
        pair = [push_consumer(cluster, "cg", f"x{i}{n}", []) for n in range(2)]
        for c in pair:
            await c.start()
        await wait_until(lambda pair=pair: one_owner_each(pair), what="both own queues")
        await asyncio.sleep(0.3)  # settled: only the notification below starts a rebalance
        for c in pair:
            await c.close()
        await asyncio.sleep(0.05)
        leaked += [t for c in pair for t in c.ownership.pull_tasks.values() if not t.done()]
        leaked += [name for c in pair for name in [c.instance.client_id] if c.ownership.pull_tasks]
    assert not leaked, leaked


async def test_broadcasting_reaches_everyone_and_resumes_from_file(cluster: LocalCluster, tmp_path: Path) -> None:
    """Broadcasting delivers every message to every consumer; a restarted one resumes from its offset file."""
    seen: dict[str, list] = {"b0": [], "b1": []}
    opts = {"message_model": MessageModel.BROADCASTING, "offset_store_dir": tmp_path / "offsets"}
    consumers = [push_consumer(cluster, "bg", n, seen[n], **opts) for n in seen]
    for c in consumers:
        await c.start()
    async with Producer(cluster.namesrv_addr) as p:
        first = [(await p.send(Message("orders", f"a{i}".encode()))).msg_id for i in range(20)]
        await wait_until(lambda: all(len(v) >= 20 for v in seen.values()), what="both got 20")
        assert all({m.msg_id for _, m in v} == set(first) for v in seen.values())
        await consumers[0].close()
        more = [(await p.send(Message("orders", f"b{i}".encode()))).msg_id for i in range(10)]
        again: list = []
        restarted = push_consumer(cluster, "bg", "b0", again, **opts)
        await restarted.start()
        try:
            await wait_until(lambda: {m.msg_id for _, m in again} >= set(more), what="restart catches up")
            await asyncio.sleep(0.3)
            assert not ({m.msg_id for _, m in again} & set(first)), "resumed from its file, not from the start"
            assert (tmp_path / "offsets").exists()
        finally:
            await restarted.close()
            await consumers[1].close()


async def test_restarted_clustering_consumer_resumes_from_broker_offset(cluster: LocalCluster) -> None:
    """A restarted clustering consumer continues from the offset committed on the broker."""
    seen: list = []
    c = push_consumer(cluster, "rg", "r0", seen)
    await c.start()
    async with Producer(cluster.namesrv_addr) as p:
        first = [(await p.send(Message("orders", f"x{i}".encode()))).msg_id for i in range(30)]
        await wait_until(lambda: len(seen) >= 30, what="first 30")
        await c.close()
        later = [(await p.send(Message("orders", f"y{i}".encode()))).msg_id for i in range(15)]
    again: list = []
    c2 = push_consumer(cluster, "rg", "r0", again)
    await c2.start()
    try:
        await wait_until(lambda: len(again) >= 15, what="15 after restart")
        await asyncio.sleep(0.3)
        assert sorted(m.msg_id for _, m in again) == sorted(later)
        assert not set(first) & {m.msg_id for _, m in again}
    finally:
        await c2.close()


async def test_long_poll_delivers_within_50ms(cluster: LocalCluster) -> None:
    """A waiting (long-polling) pull receives a new message within 50 ms of its send."""
    arrived: dict[str, float] = {}
    c = PushConsumer(cluster.namesrv_addr, "lp", instance_name="lp", **FAST)
    c.subscribe("orders")

    @c.listener
    async def on(msgs):
        for m in msgs:
            arrived[m.msg_id] = time.perf_counter()

    async with c, Producer(cluster.namesrv_addr) as p:
        await wait_until(lambda: len(owners([c])) == 8, what="queues owned")
        # Steady state: every queue has had a message (its consume-queue file exists).
        for mq in owners([c]):
            await p.send(Message("orders", b"warm-up"), queue=mq)
        await wait_until(lambda: len(arrived) >= 8, what="warm-up delivered")
        await asyncio.sleep(0.3)  # every pull is now parked on the broker
        delays = []
        for i in range(10):
            t0 = time.perf_counter()
            r = await p.send(Message("orders", f"n{i}".encode()))
            await wait_until(lambda r=r: r.msg_id in arrived, timeout=2, interval=0.001)
            delays.append(arrived[r.msg_id] - t0)
            await asyncio.sleep(0.05)
    assert max(delays) < 0.05, delays


async def test_tag_filter_delivers_only_matching(cluster: LocalCluster) -> None:
    """A subscription 'A || C' gets the A and C messages and none of the others."""
    seen: list = []
    c = PushConsumer(
        cluster.namesrv_addr,
        "tg",
        instance_name="tg",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST,
    )
    c.subscribe("orders", "A || C")

    @c.listener
    async def on(msgs):
        seen.extend(msgs)

    async with Producer(cluster.namesrv_addr) as p:
        for i in range(40):
            await p.send(Message("orders", f"t{i}".encode(), tags="ABCD"[i % 4]))
    async with c:
        await wait_until(lambda: len(seen) >= 20, what="20 matching")
        await asyncio.sleep(0.3)
    assert len(seen) == 20 and {m.tags for m in seen} == {"A", "C"}


async def test_pull_consumer_assign_seek_pause_commit(cluster: LocalCluster) -> None:
    """The pull consumer polls assigned queues, seeks by offset and time, pauses, and commits manually."""
    async with Producer(cluster.namesrv_addr) as p:
        results = [await p.send(Message("orders", f"p{i}".encode())) for i in range(40)]
    mq = results[0].message_queue
    in_mq = [r for r in results if r.message_queue == mq]
    c = PullConsumer(
        cluster.namesrv_addr,
        "pg",
        auto_commit=False,
        instance_name="pc",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    c.assign([mq])
    async with c:
        got = []
        deadline = time.monotonic() + 10
        while len(got) < len(in_mq) and time.monotonic() < deadline:
            got += await c.poll(timeout=1.0)
        assert [m.msg_id for m in got] == [r.msg_id for r in in_mq]
        assert await c.committed(mq) == -1
        await c.commit()
        assert await c.committed(mq) == len(in_mq)
        await c.seek(mq, 2)
        again = await c.poll(timeout=2.0)
        assert again[0].queue_offset == 2
        assert await c.seek_to_timestamp(mq, int(time.time() * 1000) + 60_000) == len(in_mq)
        assert await c.seek_to_timestamp(mq, 0) == 0
        assert await c.seek_to_end(mq) == len(in_mq)
        c.pause([mq])
        async with Producer(cluster.namesrv_addr) as p:
            await p.send(Message("orders", b"after"), queue=mq)
        assert await c.poll(timeout=0.5) == []
        c.resume([mq])
        late = await c.poll(timeout=3.0)
        assert [m.body for m in late] == [b"after"]
