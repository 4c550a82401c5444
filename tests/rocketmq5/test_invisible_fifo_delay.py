"""The official RocketMQ 5 Python client (5.1.2) through the gRPC front end: invisible time, FIFO groups, delays."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.client.simple_consumer import SimpleConsumer
from pymq.grpc_proxy import GrpcProxy
from pymq.testing import LocalCluster
from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


def consume_args(proxy: GrpcProxy, **kw: object) -> dict[str, object]:
    base: dict[str, object] = {"endpoint": f"127.0.0.1:{proxy.port}", "group": "g5", "topic": "t5", "await_s": 1}
    return {**base, **kw}


async def send_one(cluster: LocalCluster, body: bytes) -> str:
    async with Producer(cluster.namesrv_addr) as p:
        return (await p.send(Message("t5", body))).msg_id


async def test_unacked_message_is_redelivered_after_its_invisible_time(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    cluster, proxy = proxied
    msg_id = await send_one(cluster, b"again")
    args = consume_args(proxy, count=1, invisible_s=1, then="nothing")
    first = await run_client(rocketmq5_python, "consume.py", args)
    assert [(m["body"], m["attempt"]) for m in first["messages"]] == [("again", 1)]
    second = await run_client(rocketmq5_python, "consume.py", consume_args(proxy, count=1, invisible_s=5, await_s=2))
    assert second["errors"] == []
    assert [(m["body"], m["attempt"], m["message_id"]) for m in second["messages"]] == [("again", 2, msg_id)]


async def test_change_invisible_duration_replaces_the_handle(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    """Extended, the message stays invisible past its first duration; the new handle acks, the old one is refused."""
    cluster, proxy = proxied
    await send_one(cluster, b"long-job")
    res = await run_client(
        rocketmq5_python, "consume.py", consume_args(proxy, count=1, invisible_s=1, then="ack_old_after_extend:4")
    )
    assert [m["body"] for m in res["messages"]] == ["long-job"]
    assert len(res["errors"]) == 1 and "ack_old_after_extend" in res["errors"][0], res["errors"]
    assert "40013" in res["errors"][0], res["errors"]  # Code.INVALID_RECEIPT_HANDLE
    # 1 s was the original invisible time: extended to 4 s, nobody sees it 1.5 s later
    async with SimpleConsumer(cluster.namesrv_addr, "g5", await_duration=0) as c:
        c.subscribe("t5")
        assert await c.receive(8, 10, await_duration=1.5) == []
    ok = await run_client(rocketmq5_python, "consume.py", consume_args(proxy, count=1, invisible_s=5, then="extend:5"))
    assert ok["errors"] == [] and [m["body"] for m in ok["messages"]] == ["long-job"]


async def test_fifo_message_group_keeps_one_queue_and_order(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    """A message group's messages go to one queue (hash of the group), so they come back in order."""
    cluster, proxy = proxied
    specs = [{"body": f"step-{i}", "group": "order-42"} for i in range(5)]
    sent = await run_client(
        rocketmq5_python, "produce.py", {"endpoint": f"127.0.0.1:{proxy.port}", "topic": "t5", "messages": specs}
    )
    assert all("message_id" in r for r in sent), sent
    res = await run_client(rocketmq5_python, "consume.py", consume_args(proxy, count=5, invisible_s=10))
    assert res["errors"] == []
    assert [m["body"] for m in res["messages"]] == [f"step-{i}" for i in range(5)]
    assert {m["group"] for m in res["messages"]} == {"order-42"}
    async with SimpleConsumer(cluster.namesrv_addr, "fifo-check", await_duration=0) as c:
        c.subscribe("t5")
        got = await c.receive(32, 10, await_duration=1)
    assert len(got) == 5 and len({m.queue_id for m in got}) == 1


async def test_delivery_timestamp_delays_the_message(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    cluster, proxy = proxied
    t0 = time.time()
    spec = [{"body": "later", "delay_s": 3}]  # in whole seconds: 2..3 s from now
    sent = await run_client(
        rocketmq5_python, "produce.py", {"endpoint": f"127.0.0.1:{proxy.port}", "topic": "t5", "messages": spec}
    )
    assert "message_id" in sent[0], sent
    async with SimpleConsumer(cluster.namesrv_addr, "delayed", await_duration=0) as c:
        c.subscribe("t5")
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = await c.receive(8, 10, await_duration=0.5)
            arrived = time.time()
        assert [m.body for m in got] == [b"later"]
        assert arrived - t0 >= 1.9
        await c.ack(got[0])
