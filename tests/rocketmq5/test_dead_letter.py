"""A message the 5.x SimpleConsumer never acks goes to the group's dead-letter queue after the group's
retryMaxTimes (pop revive does it; the front end only passes receipt handles and attempts)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pymq.broker.subscription_groups import SubscriptionGroupConfig
from pymq.client import ConsumeFromWhere, Message, MessageQueue, Producer, PullConsumer
from pymq.grpc_proxy import GrpcProxy
from pymq.testing import LocalCluster
from pymq.testing.cluster import broker_name
from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


async def test_never_acked_message_is_dead_lettered_after_max_attempts(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    cluster, proxy = proxied
    cluster.brokers[0].subscription_groups.upsert(SubscriptionGroupConfig("g-dlq", retryMaxTimes=1))
    async with Producer(cluster.namesrv_addr) as p:
        await p.send(Message("t5", b"poison", tags="P"))
    args = {
        "endpoint": f"127.0.0.1:{proxy.port}",
        "group": "g-dlq",
        "topic": "t5",
        "count": 3,
        "invisible_s": 1,
        "await_s": 1,
        "deadline_s": 3.5,  # a third delivery would come ~1 s after the second
        "then": "nothing",
    }
    res = await run_client(rocketmq5_python, "consume.py", args)
    # delivered twice (attempts 1 and 2 = retryMaxTimes 1), then dead-lettered: no third delivery
    assert [(m["body"], m["attempt"]) for m in res["messages"]] == [("poison", 1), ("poison", 2)], res
    pc = PullConsumer(cluster.namesrv_addr, "dlq-reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue("%DLQ%g-dlq", broker_name(0), 0)])
    async with pc:
        dead = []
        deadline = time.monotonic() + 5
        while not dead and time.monotonic() < deadline:
            dead = await pc.poll(timeout=0.5)
    assert [(m.body, m.tags) for m in dead] == [(b"poison", "P")]
