"""SimpleConsumer (pop consumption) on an in-process cluster: receive, ack, invisibility, revival, handles."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pymq.broker.subscription_groups import SubscriptionGroupConfig
from pymq.client import ConsumeFromWhere, ConsumeResult, Message, MessageQueue, Producer, PullConsumer, PushConsumer
from pymq.client.admin import AdminClient
from pymq.client.simple_consumer import ReceivedMessage, SimpleConsumer
from pymq.errors import ClientError, InvalidReceiptHandleError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.testing import FakeClock, LocalCluster
from pymq.transport.client import RpcClient
from tests.helpers import wait_until

pytestmark = pytest.mark.integration

#: revive scan every 50 ms: unacked messages come back within ~0.1 s of their invisible time
FAST_REVIVE = {"pop_revive_interval_seconds": 0.05}


@pytest.fixture
async def cluster(tmp_path: Path, clock: FakeClock):
    async with LocalCluster(tmp_path / "c", brokers=1, broker=FAST_REVIVE, clock=clock) as c:
        await c.create_topic("jobs", 4)
        yield c


async def pass_time(clock: FakeClock, seconds: float) -> None:
    """Move the brokers' clock ``seconds`` on, then give the revive scan (every 50 ms) a few rounds to run."""
    clock.advance(seconds)
    await asyncio.sleep(0.15)


def simple(cluster: LocalCluster, group: str = "workers", tags: str = "*") -> SimpleConsumer:
    c = SimpleConsumer(cluster.namesrv_addr, group, await_duration=0)
    c.subscribe("jobs", tags)
    return c


async def send(cluster: LocalCluster, n: int, *, tags: str | None = None, prefix: str = "m") -> list[bytes]:
    bodies = [f"{prefix}{i}".encode() for i in range(n)]
    async with Producer(cluster.namesrv_addr) as p:
        for b in bodies:
            await p.send(Message("jobs", b, tags=tags))
    return bodies


async def receive_all(c: SimpleConsumer, expected: int, invisible: float = 30.0, timeout: float = 10.0) -> list:
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected:
        assert time.monotonic() < deadline, f"received {len(got)} of {expected}"
        got.extend(await c.receive(32, invisible, await_duration=0.5))
    return got


async def test_receive_ack_then_nothing_comes_back(cluster: LocalCluster, clock: FakeClock) -> None:
    bodies = await send(cluster, 10)
    async with simple(cluster) as c:
        got = await receive_all(c, 10, invisible=2.0)
        assert sorted(m.body for m in got) == sorted(bodies)
        assert all(m.topic == "jobs" and m.reconsume_times == 0 and m.receipt_handle for m in got)
        for m in got:
            await c.ack(m)
        await pass_time(clock, 2.2)  # past the invisible time: acked messages must not come back
        assert await c.receive(32, 2.0, await_duration=0.3) == []
    state = cluster.brokers[0].pop_state
    assert state is not None and state.inflight("workers") == {}


async def test_unacked_message_invisible_then_back_with_reconsume_count(
    cluster: LocalCluster, clock: FakeClock
) -> None:
    await send(cluster, 1)
    async with simple(cluster) as c:
        first = await receive_all(c, 1, invisible=2.0)
        t0 = clock.monotonic()
        # invisible to the group meanwhile (to the last moment of its invisible time)
        assert await c.receive(32, 2.0, await_duration=0.3) == []
        await pass_time(clock, 1.99)
        assert await c.receive(32, 2.0, await_duration=0.3) == []
        await pass_time(clock, 0.02)
        again = await receive_all(c, 1, invisible=5.0)
        assert clock.monotonic() - t0 >= 1.5
        m = again[0]
        assert m.body == first[0].body and m.topic == "jobs" and m.reconsume_times == 1
        assert m.msg_id == first[0].msg_id
        await c.ack(m)
        # the first handle is from a revived delivery: refused, never a wrong ack
        with pytest.raises(InvalidReceiptHandleError) as err:
            await c.ack(first[0])
        assert err.value.reason == "expired"


async def test_dead_letter_after_max_reconsume_times(cluster: LocalCluster, clock: FakeClock) -> None:
    cluster.brokers[0].subscription_groups.upsert(SubscriptionGroupConfig("dlq-g", retryMaxTimes=2))
    await send(cluster, 1)
    deliveries: list[int] = []
    broker = cluster.brokers[0]
    async with simple(cluster, "dlq-g") as c:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and broker.topics.get("%DLQ%dlq-g") is None:
            deliveries.extend(m.reconsume_times for m in await c.receive(32, 0.3, await_duration=0.3))
            await pass_time(clock, 0.3)  # the invisible time of what was received
        # dead-lettered instead of a fourth delivery: nothing more comes
        await pass_time(clock, 0.3)
        assert await c.receive(32, 0.3, await_duration=0.8) == []
    assert deliveries == [0, 1, 2]
    pc = PullConsumer(cluster.namesrv_addr, "dlq-reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue("%DLQ%dlq-g", "broker-a", 0)])
    async with pc:
        dead = []
        deadline = time.monotonic() + 10
        while not dead and time.monotonic() < deadline:
            dead = await pc.poll(timeout=0.5)
    assert [m.body for m in dead] == [b"m0"] and dead[0].reconsume_times == 3


async def test_change_invisible_duration_delays_reappearance(cluster: LocalCluster, clock: FakeClock) -> None:
    await send(cluster, 1)
    async with simple(cluster) as c:
        (m,) = await receive_all(c, 1, invisible=2.0)
        old = m.receipt_handle
        await c.change_invisible_duration(m, 4.0)
        assert m.receipt_handle != old
        # the replaced handle no longer acks; the new one does
        stale = ReceivedMessage.__new__(ReceivedMessage)
        for name in ("topic", "broker_name"):
            setattr(stale, name, getattr(m, name))
        stale.receipt_handle = old
        with pytest.raises(InvalidReceiptHandleError) as err:
            await c.ack(stale)
        assert err.value.reason == "acked"
        await pass_time(clock, 2.5)  # the first invisible time is over, the new one not
        assert await c.receive(32, 1.0, await_duration=0.2) == []
        await c.ack(m)
        with pytest.raises(InvalidReceiptHandleError) as err:
            await c.ack(m)
        assert err.value.reason == "acked"
        await pass_time(clock, 2.0)  # past the new invisible time: acked, so it stays gone
        assert await c.receive(32, 1.0, await_duration=0.2) == []


async def test_extended_message_comes_back_after_the_new_duration(cluster: LocalCluster, clock: FakeClock) -> None:
    await send(cluster, 1)
    async with simple(cluster) as c:
        (m,) = await receive_all(c, 1, invisible=1.5)
        t0 = clock.monotonic()
        await c.change_invisible_duration(m, 3.0)
        await pass_time(clock, 2.9)  # past the first invisible time, not the new one
        assert await c.receive(32, 5.0, await_duration=0.3) == []
        await pass_time(clock, 0.2)
        again = await receive_all(c, 1, invisible=5.0, timeout=10)
        assert clock.monotonic() - t0 >= 2.8
        assert again[0].body == m.body and again[0].reconsume_times == 1
        await c.ack(again[0])


async def test_forged_and_foreign_handles_refused(cluster: LocalCluster) -> None:
    await send(cluster, 1)
    async with simple(cluster) as c, simple(cluster, "others") as other:
        (m,) = await receive_all(c, 1)
        real = m.receipt_handle
        mid = len(real) // 2
        flipped = real[:mid] + ("A" if real[mid] != "A" else "B") + real[mid + 1 :]
        for forged in ("nonsense", flipped, real + "!", real[4:], ""):
            m.receipt_handle = forged
            with pytest.raises(InvalidReceiptHandleError) as err:
                await c.ack(m)
            assert err.value.reason in ("forged",), forged
        m.receipt_handle = real
        with pytest.raises(InvalidReceiptHandleError) as err:
            await other.ack(m)  # another group's consumer
        assert err.value.reason == "mismatch"
        await c.ack(m)  # the real handle still works: nothing was acked by the refusals


async def test_consumers_of_a_group_share_queues_without_duplicates(cluster: LocalCluster) -> None:
    n = 400
    bodies = await send(cluster, n)
    held: dict[bytes, str] = {}
    seen: list[bytes] = []

    async def worker(c: SimpleConsumer, name: str) -> None:
        while len(seen) < n:
            for m in await c.receive(16, 20.0, await_duration=0.2):
                assert m.body not in held, f"{m.body!r} held by {held.get(m.body)} and {name}"
                held[m.body] = name
                await asyncio.sleep(0)
                seen.append(m.body)
                del held[m.body]
                await c.ack(m)

    consumers = [simple(cluster) for _ in range(3)]
    for c in consumers:
        await c.start()
    try:
        await asyncio.wait_for(asyncio.gather(*(worker(c, f"c{i}") for i, c in enumerate(consumers))), 60)
    finally:
        for c in consumers:
            await c.close()
    assert sorted(seen) == sorted(bodies)  # each once: acked before its invisible time ended


async def test_long_polling_receive_wakes_on_arrival(cluster: LocalCluster) -> None:
    async with simple(cluster) as c:
        t0 = time.monotonic()
        assert await c.receive(8, 5.0, await_duration=0.5) == []
        assert time.monotonic() - t0 >= 0.4
        task = asyncio.ensure_future(c.receive(8, 5.0, await_duration=10.0))
        await asyncio.sleep(0.3)
        assert not task.done()
        t1 = time.monotonic()
        await send(cluster, 1)
        got = await asyncio.wait_for(task, 8)
        assert [m.body for m in got] == [b"m0"] and time.monotonic() - t1 < 3.0


async def test_long_polling_receive_wakes_on_a_redelivery(cluster: LocalCluster, clock: FakeClock) -> None:
    await send(cluster, 1)
    async with simple(cluster) as c:
        (m,) = await receive_all(c, 1, invisible=1.0)
        t0 = time.monotonic()
        # the group's retry topic does not exist yet: the wait still ends with the first revival
        task = asyncio.ensure_future(c.receive(8, 5.0, await_duration=10.0))
        await wait_until(lambda: cluster.brokers[0].pull_hold.held_count > 0, what="receive held")
        clock.advance(1.1)  # the invisible time ends while the receive is held
        back = await task
        assert [x.body for x in back] == [m.body] and time.monotonic() - t0 < 5.0
        await c.ack(back[0])


async def test_broker_close_answers_held_receives(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "h", brokers=1) as cluster:
        await cluster.create_topic("jobs", 2)
        async with simple(cluster) as c:
            task = asyncio.ensure_future(c.receive(8, 5.0, await_duration=12.0))
            await wait_until(lambda: cluster.brokers[0].pull_hold.held_count > 0, what="receive held")
            t0 = time.monotonic()
            await cluster.stop_broker(cluster.brokers[0])
            assert time.monotonic() - t0 < 4.0  # the held receive was answered, not waited out
            assert await asyncio.wait_for(task, 5) == []


async def test_tag_filter(cluster: LocalCluster) -> None:
    await send(cluster, 3, tags="a", prefix="a")
    await send(cluster, 3, tags="b", prefix="b")
    async with simple(cluster, tags="b") as c:
        got = await receive_all(c, 3)
        assert sorted(m.body for m in got) == [b"b0", b"b1", b"b2"]
        assert await c.receive(32, 5.0, await_duration=0.2) == []


async def test_push_and_pop_groups_coexist_on_one_topic(cluster: LocalCluster) -> None:
    bodies = await send(cluster, 40)
    pushed: list[bytes] = []
    push = PushConsumer(cluster.namesrv_addr, "pushers", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    push.subscribe("jobs")

    @push.listener
    async def on(msgs):
        pushed.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    async with push, simple(cluster, "poppers") as c:
        popped = await receive_all(c, 40)
        for m in popped:
            await c.ack(m)
        await wait_until(lambda: len(pushed) >= 40, timeout=15, what="push consumer got all")
    assert sorted(pushed) == sorted(bodies) and sorted(m.body for m in popped) == sorted(bodies)


async def test_inflight_counts_in_consumer_progress(cluster: LocalCluster) -> None:
    await send(cluster, 6)
    async with simple(cluster) as c, AdminClient(cluster.namesrv_addr) as admin:
        got = await receive_all(c, 6)
        await c.ack(got[0])
        progress = await admin.consumer_progress("workers", "jobs")
        assert progress["totalInFlight"] == 5
        assert sum(r["inFlight"] for r in progress["queues"]) == 5
        for m in got[1:]:
            await c.ack(m)
        assert (await admin.consumer_progress("workers", "jobs"))["totalInFlight"] == 0


async def test_pop_request_bounds_answer_invalid_parameter(cluster: LocalCluster) -> None:
    async with RpcClient() as rpc:
        addr = cluster.brokers[0].address
        for ext in (
            {"consumerGroup": "g", "topic": "jobs", "invisibleTime": 10},
            {"consumerGroup": "g", "topic": "jobs", "invisibleTime": 1000, "maxMsgNums": 33},
            {"consumerGroup": "g", "topic": "jobs", "invisibleTime": 1000, "queueId": 4},
        ):
            resp = await rpc.invoke(addr, Command.request(RequestCode.POP_MESSAGE, ext))
            assert resp.code == ResponseCode.INVALID_PARAMETER, (ext, resp.remark)
        resp = await rpc.invoke(
            addr,
            Command.request(RequestCode.POP_MESSAGE, {"consumerGroup": "g", "topic": "nope", "invisibleTime": 1000}),
        )
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST


async def test_handles_and_inflight_survive_a_broker_restart(tmp_path: Path, clock: FakeClock) -> None:
    async with LocalCluster(tmp_path / "r", brokers=1, broker=FAST_REVIVE, clock=clock) as cluster:
        await cluster.create_topic("jobs", 2)
        await send(cluster, 6)
        async with simple(cluster) as c:
            got = await receive_all(c, 6, invisible=6.0)
            await c.ack(got[0])
            await cluster.stop_broker(cluster.brokers[0])
            await cluster.add_broker(0)
            await cluster.wait_for_route("jobs", 1)
        async with simple(cluster) as c:
            # the broker's secret is in its store: handles from before the restart still ack
            await c.ack(got[1])
            with pytest.raises(InvalidReceiptHandleError) as err:
                await c.ack(got[0])
            # "acked" while its batch is open (replayed with its ack), "stale" once the batch is done: never acked twice
            assert err.value.reason in ("acked", "stale")
            await pass_time(clock, 6.5)  # past the invisible time of the unacked four
            back = await receive_all(c, 4, invisible=30.0)
            assert sorted(m.body for m in back) == sorted(m.body for m in got[2:])
            assert all(m.reconsume_times == 1 for m in back)
            assert await c.receive(32, 30.0, await_duration=0.5) == []


async def test_inflight_limit_stops_pops_until_acks_make_room(tmp_path: Path) -> None:
    broker = {**FAST_REVIVE, "pop_max_inflight_checkpoints": 2}
    async with LocalCluster(tmp_path / "l", brokers=1, broker=broker) as cluster:
        await cluster.create_topic("jobs", 1)
        await send(cluster, 5)
        async with simple(cluster) as c:
            first = await c.receive(1, 30.0)
            second = await c.receive(1, 30.0)
            assert len(first) == len(second) == 1
            assert await c.receive(1, 30.0) == []  # two batches in flight: the limit
            await c.ack(first[0])
            assert len(await c.receive(1, 30.0)) == 1


async def test_group_starting_at_last_offset_skips_the_backlog_only(cluster: LocalCluster) -> None:
    await send(cluster, 5, prefix="old")
    c = SimpleConsumer(cluster.namesrv_addr, "late", await_duration=0, consume_from_where=ConsumeFromWhere.LAST_OFFSET)
    c.subscribe("jobs")
    async with c:
        assert await c.receive(32, 5.0) == []  # starts at the end: the backlog is skipped
        await send(cluster, 5, prefix="new")  # arrives between receives: not skipped
        got = await receive_all(c, 5)
        assert sorted(m.body for m in got) == [b"new0", b"new1", b"new2", b"new3", b"new4"]
    with pytest.raises(ClientError):
        SimpleConsumer(cluster.namesrv_addr, "g", consume_from_where=ConsumeFromWhere.TIMESTAMP)


async def test_batch_ack(cluster: LocalCluster, clock: FakeClock) -> None:
    await send(cluster, 40)
    async with simple(cluster) as c:
        got = await receive_all(c, 40, invisible=3.0)
        forged = ReceivedMessage.__new__(ReceivedMessage)
        for name in ("topic", "broker_name"):
            setattr(forged, name, getattr(got[0], name))
        forged.receipt_handle = "x.y"
        await c.ack(got[0])
        results = await c.ack_many([*got, forged, got[1]])
        assert results[0] is not None and results[0].reason == "acked"
        assert all(r is None for r in results[1:40])
        assert results[40] is not None and results[40].reason == "forged"
        assert results[41] is not None and results[41].reason == "acked"  # twice in one batch
        state = cluster.brokers[0].pop_state
        assert state is not None and state.inflight("workers") == {}
        await pass_time(clock, 3.3)  # past the invisible time: all acked, nothing comes back
        assert await c.receive(32, 5.0, await_duration=0.3) == []


def _with_handle(m: ReceivedMessage, handle: str) -> ReceivedMessage:
    other = ReceivedMessage.__new__(ReceivedMessage)
    for name in ("topic", "broker_name"):
        setattr(other, name, getattr(m, name))
    other.receipt_handle = handle
    return other


async def test_a_fresh_batch_with_one_bad_handle_refuses_that_one_only(cluster: LocalCluster, clock: FakeClock) -> None:
    """A batch of fresh handles of one checkpoint (the batch path's all-at-once check) with one
    naming another queue offset, then one naming a message twice: each bad handle is refused
    alone, every other message is acked."""
    await send(cluster, 40)
    async with simple(cluster) as c:
        got = await receive_all(c, 40, invisible=3.0)
        part, index, _offset = got[3].receipt_handle.rsplit(".", 2)
        wrong_offset = _with_handle(got[3], f"{part}.{index}.999999")
        results = await c.ack_many([*got[:3], wrong_offset, *got[4:20]])
        assert [r is None for r in results] == [True] * 3 + [False] + [True] * 16
        assert results[3] is not None and results[3].reason == "stale"
        results = await c.ack_many([*got[20:], got[3], got[20]])  # got[20] twice
        assert [r is None for r in results] == [True] * 21 + [False]
        assert results[-1] is not None and results[-1].reason == "acked"
        state = cluster.brokers[0].pop_state
        assert state is not None and state.inflight("workers") == {}
        await pass_time(clock, 3.3)  # past the invisible time: all acked, nothing comes back
        assert await c.receive(32, 5.0, await_duration=0.3) == []


async def test_concurrent_acks_share_a_request_and_a_refusal_raises_for_its_caller_only(
    cluster: LocalCluster, clock: FakeClock
) -> None:
    await send(cluster, 40)
    async with simple(cluster) as c:
        got = await receive_all(c, 40, invisible=3.0)
        await c.ack(got[0])
        stale = ReceivedMessage.__new__(ReceivedMessage)
        for name in ("topic", "broker_name"):
            setattr(stale, name, getattr(got[0], name))
        stale.receipt_handle = got[1].receipt_handle.rsplit(".", 1)[0] + ".999999"  # not its queue offset
        # acks made in one loop turn: one BATCH_ACK_MESSAGE; each caller gets its own message's answer
        results = await asyncio.gather(*(c.ack(m) for m in [got[0], stale, *got[1:]]), return_exceptions=True)
        assert isinstance(results[0], InvalidReceiptHandleError) and results[0].reason == "acked"
        assert isinstance(results[1], InvalidReceiptHandleError) and results[1].reason == "stale"
        assert results[2:] == [None] * 39
        state = cluster.brokers[0].pop_state
        assert state is not None and state.inflight("workers") == {}
        await pass_time(clock, 3.3)  # past the invisible time: all acked, nothing comes back
        assert await c.receive(32, 5.0, await_duration=0.3) == []


async def test_revive_log_is_read_only_to_clients(cluster: LocalCluster) -> None:
    revive = "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert cluster.brokers[0].topics.get(revive) is not None
    async with RpcClient() as rpc:
        resp = await rpc.invoke(
            cluster.brokers[0].address,
            Command.request(RequestCode.SEND_MESSAGE, {"topic": revive, "queueId": 0}, b"forged checkpoint"),
        )
    assert resp.code == ResponseCode.NO_PERMISSION


async def test_receives_from_every_broker_of_the_topic(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "two", brokers=2, broker=FAST_REVIVE) as cluster:
        await cluster.create_topic("jobs", 2)
        bodies = await send(cluster, 20)
        async with simple(cluster) as c:
            got = await receive_all(c, 20)
            assert sorted(m.body for m in got) == sorted(bodies)
            assert {m.broker_name for m in got} == {"broker-a", "broker-b"}
            results = await c.ack_many(got)  # one request per broker
            assert results == [None] * 20


async def test_receive_argument_checks(cluster: LocalCluster) -> None:
    async with simple(cluster) as c:
        with pytest.raises(ClientError):
            await c.receive(0)
        with pytest.raises(ClientError):
            await c.receive(33)
        with pytest.raises(ClientError):
            await c.receive(1, invisible_duration=0.01)
