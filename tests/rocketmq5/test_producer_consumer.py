"""The official RocketMQ 5 Python client (5.1.2) against pymq through the gRPC front end."""

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


def endpoint(proxy: GrpcProxy) -> str:
    return f"127.0.0.1:{proxy.port}"


async def test_5x_producer_to_pymq_sdk(proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path) -> None:
    """Sent by the 5.x Producer, read by pymq's SDK: body, tag, keys and properties intact."""
    cluster, proxy = proxied
    specs = [
        {"body": f"hello-{i}", "tag": "TagA", "keys": ["k1", f"id-{i}"], "props": {"color": "red", "n": str(i)}}
        for i in range(3)
    ]
    sent = await run_client(
        rocketmq5_python, "produce.py", {"endpoint": endpoint(proxy), "topic": "t5", "messages": specs}
    )
    assert all("message_id" in r for r in sent), sent
    async with SimpleConsumer(cluster.namesrv_addr, "sdk-readers", await_duration=0) as c:
        c.subscribe("t5")
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(await c.receive(32, 30, await_duration=0.5))
        for m in got:
            await c.ack(m)
    by_body = {m.body.decode(): m for m in got}
    assert sorted(by_body) == ["hello-0", "hello-1", "hello-2"]
    for i in range(3):
        m = by_body[f"hello-{i}"]
        assert m.tags == "TagA"
        assert sorted(m.keys) == sorted(["k1", f"id-{i}"])
        assert m.properties["color"] == "red" and m.properties["n"] == str(i)
        assert m.msg_id == sent[i]["message_id"]


async def test_pymq_sdk_to_5x_simple_consumer(proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path) -> None:
    """Sent by pymq's SDK, received and acked by the 5.x SimpleConsumer; acked messages do not come back."""
    cluster, proxy = proxied
    async with Producer(cluster.namesrv_addr) as p:
        ids = []
        for i in range(4):
            r = await p.send(Message("t5", f"b{i}".encode(), tags="TagB", keys=[f"key{i}"], properties={"p": f"v{i}"}))
            ids.append(r.msg_id)
    args = {"endpoint": endpoint(proxy), "group": "g5", "topic": "t5", "count": 4, "invisible_s": 10, "await_s": 1}
    res = await run_client(rocketmq5_python, "consume.py", args)
    assert res["errors"] == []
    got = {m["body"]: m for m in res["messages"]}
    assert sorted(got) == ["b0", "b1", "b2", "b3"]
    for i in range(4):
        m = got[f"b{i}"]
        assert m["tag"] == "TagB" and m["keys"] == [f"key{i}"] and m["props"] == {"p": f"v{i}"}
        assert m["message_id"] == ids[i] and m["attempt"] == 1
    # all acked: a second receive (long polling 1 s) finds nothing
    again = await run_client(rocketmq5_python, "consume.py", {**args, "count": 1, "deadline_s": 2})
    assert again["messages"] == [] and again["errors"] == []
