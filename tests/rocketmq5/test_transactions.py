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


async def test_orphaned_half_message_is_resolved_by_a_check_back_to_another_producer(
    tmp_path: Path, rocketmq5_python: Path
) -> None:
    """The producer that sent the half message exits without ending it; the broker's check-back reaches a
    second producer process of the topic as RecoverOrphanedTransactionCommand on its Telemetry stream; its
    checker commits (EndTransaction from SERVER_CHECK) and the message is delivered."""
    fast_check = {"transaction_timeout_seconds": 1.0, "transaction_check_interval_seconds": 0.3}
    async with LocalCluster(tmp_path / "c", brokers=1, broker=fast_check) as cluster:
        await cluster.create_topic("t5", 2)
        async with GrpcProxy(cluster.namesrv_addr, port=0) as proxy:
            endpoint = f"127.0.0.1:{proxy.port}"
            first = await run_client(
                rocketmq5_python,
                "tx.py",
                {"endpoint": endpoint, "topic": "t5", "messages": [{"body": "orphan", "end": "none"}]},
            )
            assert not first["sent"][0].startswith("error"), first
            assert await receive_bodies(cluster, "tx-orphans", 1, 0.5) == []  # a half message: not visible
            second = await run_client(
                rocketmq5_python,
                "tx.py",
                {"endpoint": endpoint, "topic": "t5", "messages": [], "checker": "commit", "stay_s": 10,
                 "expect_checks": 1},
            )  # fmt: skip
            assert second["checked"][:1] == ["orphan"], second
            assert await receive_bodies(cluster, "tx-orphans", 1, 5.0) == [b"orphan"]
