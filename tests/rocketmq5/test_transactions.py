"""Transactional messages from the official 5.x Producer through the gRPC front end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pymq.client.simple_consumer import SimpleConsumer
from pymq.grpc_proxy import GrpcProxy
from pymq.testing import LocalCluster
from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


async def receive_bodies(cluster: LocalCluster, group: str, expect: int, wait: float) -> list[bytes]:
    async with SimpleConsumer(cluster.namesrv_addr, group, await_duration=0) as c:
        c.subscribe("t5")
        got: list[bytes] = []
        deadline = time.monotonic() + wait
        while len(got) < expect and time.monotonic() < deadline:
            msgs = await c.receive(32, 30, await_duration=0.5)
            for m in msgs:
                await c.ack(m)
            got.extend(m.body for m in msgs)
        return got


async def test_commit_delivers_and_rollback_drops(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    cluster, proxy = proxied
    specs = [{"body": "committed", "end": "commit"}, {"body": "rolled-back", "end": "rollback"}]
    res = await run_client(
        rocketmq5_python, "tx.py", {"endpoint": f"127.0.0.1:{proxy.port}", "topic": "t5", "messages": specs}
    )
    assert not any(s.startswith("error") for s in res["sent"]), res
    assert await receive_bodies(cluster, "tx-readers", 2, 2.0) == [b"committed"]
