"""Issue 36: held long-polling pulls must not starve the other requests of their connection."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pymq.client import broker_api
from pymq.client.producer import Producer
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.message import Message
from pymq.protocol.route import MessageQueue
from pymq.testing import LocalCluster
from pymq.transport.client import RpcClient
from pymq.transport.connection import MAX_INFLIGHT_HANDLERS

pytestmark = pytest.mark.integration

#: two topics (a topic has at most 1024 queues) with more queues between them than handler slots
PER_TOPIC = MAX_INFLIGHT_HANDLERS // 2 + 100
QUEUES = 2 * PER_TOPIC


async def _wait_held(cluster: LocalCluster, n: int) -> None:
    hold = cluster.brokers[0].pull_hold
    deadline = time.monotonic() + 20
    while hold.held_count < n:
        assert time.monotonic() < deadline, f"only {hold.held_count} of {n} pulls held"
        await asyncio.sleep(0.05)


async def test_held_pulls_leave_the_connection_free(tmp_path: Path) -> None:
    """More held pulls than handler slots on one connection: a query on it still answers at once,
    and a message still wakes its queue's pull."""
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster, RpcClient() as rpc:
        for topic in ("wide0", "wide1"):
            await cluster.create_topic(topic, PER_TOPIC)
        addr = cluster.brokers[0].address
        pulls = [
            asyncio.ensure_future(
                rpc.invoke(
                    addr,
                    broker_api.pull_message(
                        "g", MessageQueue(f"wide{q % 2}", "", q // 2), 0, max_nums=32, suspend_ms=20_000
                    ),
                    30.0,
                )
            )
            for q in range(QUEUES)
        ]
        try:
            await _wait_held(cluster, MAX_INFLIGHT_HANDLERS)
            latencies = []
            for _ in range(20):
                started = time.perf_counter()
                resp = await rpc.invoke(addr, broker_api.queue_offset(RequestCode.GET_MAX_OFFSET, "wide0", 7), 3.0)
                latencies.append(time.perf_counter() - started)
                assert resp.code == ResponseCode.SUCCESS
            assert max(latencies) < 0.5, latencies
            await _wait_held(cluster, QUEUES)  # every pull got past the handler slots and is held
            async with Producer(cluster.namesrv_addr) as p:
                await p.send(
                    Message("wide1", b"x"),
                    queue=MessageQueue("wide1", cluster.brokers[0].config.broker_name, PER_TOPIC - 1),
                )
            resp = await asyncio.wait_for(pulls[-1], 5.0)
            assert resp.code == ResponseCode.SUCCESS
        finally:
            for f in pulls:
                f.cancel()
            await asyncio.gather(*pulls, return_exceptions=True)


async def test_queue_offsets_of_many_queues_in_one_request(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster, RpcClient() as rpc:
        broker = cluster.brokers[0]
        await cluster.create_topic("t", 4)
        async with Producer(cluster.namesrv_addr) as p:
            for _ in range(3):
                await p.send(Message("t", b"x"), queue=MessageQueue("t", broker.config.broker_name, 2))
        await rpc.invoke_ok(broker.address, broker_api.update_consumer_offset("g", "t", 2, 1), 3.0)
        mqs = [MessageQueue("t", "", 0), MessageQueue("t", "", 2)]
        resp = await rpc.invoke_ok(broker.address, broker_api.query_queue_offsets("g", mqs, timestamp=0), 3.0)
        assert broker_api.read_queue_offsets(resp, 2) == [(-1, 0, 0, 0), (1, 0, 3, 0)]
        bad = Command.request(RequestCode.QUERY_QUEUE_OFFSETS, {"consumerGroup": "g"}, b"\x01")
        assert (await rpc.invoke(broker.address, bad, 3.0)).code == ResponseCode.INVALID_PARAMETER


async def test_one_wait_for_many_queues(tmp_path: Path) -> None:
    """WAIT_QUEUE_ARRIVAL answers at once for queues already past their offset, else when a message lands."""
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster, RpcClient() as rpc:
        broker = cluster.brokers[0]
        name = broker.config.broker_name
        await cluster.create_topic("t", 4)
        async with Producer(cluster.namesrv_addr) as p:
            await p.send(Message("t", b"x"), queue=MessageQueue("t", name, 0))
            waits = [("t", 0, 0), ("t", 1, 0), ("gone", 0, 0)]
            resp = await rpc.invoke_ok(broker.address, broker_api.wait_queue_arrival("g", waits, 10_000), 3.0)
            assert broker_api.read_ready(resp) == [0, 2]  # has a message; a topic no pull could wait on
            waits = [("t", 0, 1), ("t", 1, 0), ("t", 3, 0)]
            held = asyncio.ensure_future(
                rpc.invoke_ok(broker.address, broker_api.wait_queue_arrival("g", waits, 10_000), 15.0)
            )
            deadline = time.monotonic() + 5
            while broker.pull_hold.held_count < 3:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            await p.send(Message("t", b"y"), queue=MessageQueue("t", name, 3))
            assert broker_api.read_ready(await asyncio.wait_for(held, 5.0)) == [2]
        assert broker.pull_hold.held_count == 0  # the answered wait left nothing behind
        resp = await rpc.invoke_ok(broker.address, broker_api.wait_queue_arrival("g", [("t", 1, 0)], 200), 3.0)
        assert broker_api.read_ready(resp) == []  # timed out
