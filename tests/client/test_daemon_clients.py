"""Clients against real daemon processes: failover around a frozen broker, and the blocking facade."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from pymq.client import LatencyAwareSelector, Message, Producer, RoundRobinSelector
from pymq.client.sync import ConsumeFromWhere, PullConsumer
from pymq.client.sync import Producer as SyncProducer
from pymq.errors import PymqError
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.daemon_helpers import create_topic, wait_for_route

pytestmark = pytest.mark.integration


@pytest.fixture
def daemons(tmp_path: Path, processes: list[DaemonProcess]) -> tuple[DaemonProcess, list[DaemonProcess]]:
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    brokers = []
    for name in ("broker-a", "broker-b"):
        b = broker_process(tmp_path, ns.address, name).start()
        processes.append(b)
        brokers.append(b)
    asyncio.run(create_topic(brokers, "orders"))
    asyncio.run(wait_for_route(ns.address, "orders", len(brokers)))
    return ns, brokers


def test_latency_aware_avoids_frozen_broker_round_robin_does_not(daemons) -> None:
    """With broker-b frozen (SIGSTOP), latency-aware sends go to broker-a; round robin keeps timing out on b."""
    ns, brokers = daemons

    async def run(selector) -> tuple[int, int, set[str]]:
        ok = failed = 0
        used: set[str] = set()
        async with Producer(ns.address, "p", send_timeout=0.3, selector=selector) as p:
            await p.send(Message("orders", b"warm"))
            brokers[1].signal(signal.SIGSTOP)
            try:
                for i in range(20):
                    try:
                        r = await p.send(Message("orders", f"m{i}".encode()))
                        ok += 1
                        used.add(r.message_queue.brokerName)
                    except PymqError:
                        failed += 1
            finally:
                brokers[1].signal(signal.SIGCONT)
        return ok, failed, used

    rr_ok, rr_failed, _ = asyncio.run(run(RoundRobinSelector()))
    la_ok, la_failed, la_used = asyncio.run(run(LatencyAwareSelector()))
    assert rr_failed >= 5, (rr_ok, rr_failed)  # about every other send hits the frozen broker
    assert la_failed <= 2 and la_ok >= 18 and la_used == {"broker-a"}, (la_ok, la_failed, la_used)


def test_sync_facade_sends_and_polls(daemons) -> None:
    """Plain synchronous code sends with the blocking Producer and polls with the blocking PullConsumer."""
    ns, _ = daemons
    with SyncProducer(ns.address, "sync-p") as producer:
        sent = {producer.send(Message("orders", f"s{i}".encode(), keys=[f"k{i}"])).msg_id for i in range(25)}
        batch = producer.send_batch([Message("orders", b"b") for _ in range(5)])
        sent |= set(batch.msg_ids)
    consumer = PullConsumer(ns.address, "sync-c", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")
    got: set[str] = set()
    with consumer:
        deadline = time.monotonic() + 15
        while got != sent and time.monotonic() < deadline:
            got |= {m.msg_id for m in consumer.poll(timeout=1.0)}
    assert got == sent
