"""The official 5.x PushConsumer through the gRPC front end: Telemetry settings, QueryAssignment, receive, ack,
and a failed consumption retried after the backoff the front end told it (ChangeInvisibleDuration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.grpc_proxy import GrpcProxy
from pymq.testing import LocalCluster
from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


async def test_push_consumer_consumes_and_retries_a_failure(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    cluster, proxy = proxied
    async with Producer(cluster.namesrv_addr) as p:
        for i in range(3):
            await p.send(Message("t5", f"push-{i}".encode()))
    args = {
        "endpoint": f"127.0.0.1:{proxy.port}",
        "group": "g-push",
        "topic": "t5",
        "count": 3,
        "deadline_s": 15,
        "fail_once": ["push-1"],
    }
    res = await run_client(rocketmq5_python, "push.py", args)
    assert res["failed"] == ["push-1"]
    attempts = {m["body"]: m["attempt"] for m in res["consumed"]}
    assert attempts == {"push-0": 1, "push-1": 2, "push-2": 1}
