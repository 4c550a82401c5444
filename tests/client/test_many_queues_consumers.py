"""Issue 36: clients consuming thousands of queues each, with each kind of consumer.

5 topics x 300 queues: 1,500 queues per client, past the 1,000 where consumers used to starve
(the 10,000-queue run is benchmarks/many_queues_bench.py), one message in every queue before the
consumers start and one more after a broker restart. A push consumer, a pull consumer and a
SimpleConsumer (three groups, a client each) run side by side on one broker (one restart for
the three: a broker's clean stop syncs every consume-queue file, seconds on a busy disk):
every message is consumed, the offsets are committed, and a request on each client's own
connection to the broker is answered within normal latency while its idle queues wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pymq.client import broker_api
from pymq.client.consumer_types import ConsumeFromWhere, ConsumeResult
from pymq.client.instance import ClientInstance
from pymq.client.producer import Producer
from pymq.client.pull_consumer import PullConsumer
from pymq.client.push_consumer import PushConsumer
from pymq.client.simple_consumer import SimpleConsumer
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.message import Message, MessageExt
from pymq.protocol.route import MessageQueue
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration

TOPICS = [f"wide{i}" for i in range(5)]
QUEUES_PER_TOPIC = 300
QUEUES = len(TOPICS) * QUEUES_PER_TOPIC
CLIENT = {"persist_offset_interval_seconds": 0.5, "poll_namesrv_interval_seconds": 1.0}


async def _send_round(cluster: LocalCluster, tag: str) -> set[bytes]:
    """One message into every queue; their bodies."""
    name = cluster.brokers[0].config.broker_name
    bodies: set[bytes] = set()
    async with Producer(cluster.namesrv_addr, instance_name=f"producer-{tag}") as p:
        for topic in TOPICS:
            for start in range(0, QUEUES_PER_TOPIC, 250):
                sends = []
                for q in range(start, min(start + 250, QUEUES_PER_TOPIC)):
                    body = f"{tag}/{topic}/{q}".encode()
                    bodies.add(body)
                    sends.append(p.send(Message(topic, body), queue=MessageQueue(topic, name, q), timeout=20.0))
                await asyncio.gather(*sends)
    return bodies


async def _wait_for(what: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why()
        await asyncio.sleep(0.05)


async def _restart_broker(cluster: LocalCluster) -> None:
    old = cluster.brokers[0]
    port = int(old.address.rsplit(":", 1)[1])
    await cluster.stop_broker(old)
    await cluster.add_broker(0, port=port)  # same store, same address: the client reconnects


async def _quick_answers(inst: ClientInstance, addr: str) -> list[float]:
    """Latencies of an unrelated request on the client's own connection to the broker."""
    out = []
    for _ in range(20):
        started = time.perf_counter()
        resp = await inst.rpc.invoke(addr, broker_api.queue_offset(RequestCode.GET_MAX_OFFSET, TOPICS[0], 3), 3.0)
        out.append(time.perf_counter() - started)
        assert resp.code == ResponseCode.SUCCESS
    return out


def _committed(cluster: LocalCluster, group: str, offset: int) -> int:
    """Queues whose committed offset for ``group`` is ``offset``."""
    offsets = cluster.brokers[0].offsets
    return sum(1 for t in TOPICS for q in range(QUEUES_PER_TOPIC) if offsets.query(group, t, q) == offset)


class _Consumed:
    """What one consumer received."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def count(self) -> int:
        return len(set(self.bodies))


async def _simple_loop(consumer: SimpleConsumer, got: _Consumed) -> None:
    """Receive and ack until cancelled (a broker away: try again)."""
    while True:
        try:
            msgs = await consumer.receive(32, invisible_duration=60.0, await_duration=1.0)
            if msgs:
                errors = await consumer.ack_many(msgs)
                assert errors == [None] * len(msgs)
                got.bodies.extend(m.body for m in msgs)
        except PymqError:
            await asyncio.sleep(0.2)


async def _poll_loop(consumer: PullConsumer, got: _Consumed) -> None:
    while True:
        got.bodies.extend(m.body for m in await consumer.poll(timeout=0.5))


@pytest.mark.timeout(240)
async def test_push_pull_and_simple_consumers_of_1500_queues_each(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster:
        for topic in TOPICS:
            await cluster.create_topic(topic, QUEUES_PER_TOPIC)
        first = await _send_round(cluster, "a")
        got = {kind: _Consumed() for kind in ("push", "pull", "simple")}
        push = PushConsumer(
            cluster.namesrv_addr,
            "wide-push",
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            instance_name="push",
            **CLIENT,
        )
        pull = PullConsumer(
            cluster.namesrv_addr,
            "wide-pull",
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            instance_name="pull",
            **CLIENT,
        )
        simple = SimpleConsumer(cluster.namesrv_addr, "wide-simple", instance_name="simple", **CLIENT)
        for topic in TOPICS:
            push.subscribe(topic)
            pull.subscribe(topic)
            simple.subscribe(topic)

        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            got["push"].bodies.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        push.register_listener(listener)
        loops: list[asyncio.Task[None]] = []
        try:
            await push.start()
            await pull.start()
            await simple.start()
            loops += [
                asyncio.ensure_future(_poll_loop(pull, got["pull"])),
                asyncio.ensure_future(_simple_loop(simple, got["simple"])),
            ]
            assert len(push.process_queues) >= QUEUES and len(pull.process_queues) == QUEUES  # (push: + retry)

            def all_consumed(n: int) -> Callable[[], bool]:
                return lambda: all(g.count() >= n for g in got.values())

            def progress() -> str:
                return ", ".join(f"{k} {g.count()}" for k, g in got.items())

            await _wait_for(all_consumed(QUEUES), 60, progress)
            for group in ("wide-push", "wide-pull"):
                await _wait_for(lambda g=group: _committed(cluster, g, 1) == QUEUES, 15, lambda: "not committed")
            # Idle now: each client's queues wait on the broker in a few requests, not a held pull each.
            await _wait_for(
                lambda: cluster.brokers[0].pull_hold.held_count >= 2 * QUEUES, 15, lambda: "queues not waiting"
            )
            for c in (push, pull):
                assert c.arrivals is not None and 0 < c.arrivals.rounds <= QUEUES // 100
            for inst in (push.instance, pull.instance, simple.instance):
                assert inst is not None
                latencies = await _quick_answers(inst, cluster.brokers[0].address)
                assert max(latencies) < 0.5, latencies

            await _restart_broker(cluster)
            second = await _send_round(cluster, "b")
            await _wait_for(all_consumed(2 * QUEUES), 90, progress)
            for group in ("wide-push", "wide-pull"):
                await _wait_for(lambda g=group: _committed(cluster, g, 2) == QUEUES, 15, lambda: "not committed")
            for g in got.values():
                assert set(g.bodies) == first | second
            # Popped, acked and never again (the acks outlived the restart).
            assert sorted(got["simple"].bodies) == sorted(first | second)
        finally:
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await simple.close()
            await pull.close()
            await push.close()
