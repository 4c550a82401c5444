"""SimpleConsumer against real daemons: a group's receivers never hold one message at once (thousands of
messages), and in-flight messages survive a broker kill -9 (acked stay acked, unacked come back)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.client.simple_consumer import ReceivedMessage, SimpleConsumer
from pymq.errors import PymqError
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.daemon_helpers import create_topic, wait_for_route

pytestmark = pytest.mark.integration

ENV = {"PYMQ_POP_REVIVE_INTERVAL_SECONDS": "0.1"}


def start_broker(tmp_path: Path, ns: DaemonProcess, processes: list[DaemonProcess]) -> DaemonProcess:
    b = broker_process(tmp_path, ns.address, "broker-a", env=ENV).start()
    processes.append(b)
    return b


async def send(namesrv: str, bodies: list[bytes]) -> None:
    async with Producer(namesrv) as p:
        for b in bodies:
            await p.send(Message("jobs", b))


async def drain(c: SimpleConsumer, want: set[bytes], invisible: float, timeout: float) -> list[ReceivedMessage]:
    """Receive until every body of ``want`` came (duplicates kept, for the caller to check)."""
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while not want <= {m.body for m in got}:
        assert time.monotonic() < deadline, f"missing {len(want - {m.body for m in got})} of {len(want)}"
        try:
            got.extend(await c.receive(32, invisible, await_duration=1.0))
        except PymqError:
            await asyncio.sleep(0.2)  # the broker is still starting or its route is not refreshed yet
    return got


async def test_group_shares_thousands_without_holding_one_twice_and_survives_kill9(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    broker = start_broker(tmp_path, ns, processes)
    await create_topic([broker], "jobs", 4)
    await wait_for_route(ns.address, "jobs", 1)

    # --- two receivers of one group over 2,000 messages: never the same message at once ----------------
    n = 2000
    bodies = [f"m{i}".encode() for i in range(n)]
    await send(ns.address, bodies)
    held: dict[bytes, int] = {}
    seen: list[bytes] = []

    async def worker(c: SimpleConsumer, me: int) -> None:
        while len(seen) < n:
            for m in await c.receive(32, 30.0, await_duration=0.5):
                other = held.setdefault(m.body, me)
                assert other == me, f"{m.body!r} held by consumers {other} and {me}"
                await asyncio.sleep(0)  # let the other receiver run while this one holds it
                seen.append(m.body)
                await c.ack(m)
                del held[m.body]

    c1 = SimpleConsumer(ns.address, "workers", await_duration=0)
    c2 = SimpleConsumer(ns.address, "workers", await_duration=0)
    for c in (c1, c2):
        c.subscribe("jobs")
    async with c1, c2:
        await asyncio.wait_for(asyncio.gather(worker(c1, 1), worker(c2, 2)), 120)
    assert sorted(seen) == sorted(bodies), "every message exactly once"

    # --- in flight across a kill -9 ---------------------------------------------------------------------
    batch = [f"k{i}".encode() for i in range(200)]
    await send(ns.address, batch)
    c = SimpleConsumer(ns.address, "workers", await_duration=0)
    c.subscribe("jobs")
    async with c:
        got = await drain(c, set(batch), invisible=8.0, timeout=30)
        assert len(got) == len(batch)
        acked = {m.body for m in got[::2]}
        # acked the three ways the broker stores acks: single ACK_MESSAGE, concurrent ack() calls
        # coalesced into one BATCH_ACK_MESSAGE, and ack_many (both: one store call for the ack
        # records of several checkpoints in several revive queues)
        for m in got[:20:2]:
            await c.ack(m)
        await asyncio.gather(*(c.ack(m) for m in got[20:120:2]))
        assert await c.ack_many(got[120::2]) == [None] * len(got[120::2])
    unacked = set(batch) - acked
    broker.kill()
    broker = start_broker(tmp_path, ns, processes)
    await wait_for_route(ns.address, "jobs", 1)
    c = SimpleConsumer(ns.address, "workers", await_duration=0)
    c.subscribe("jobs")
    async with c:
        back = await drain(c, unacked, invisible=30.0, timeout=60)
        for m in back:
            await c.ack(m)
        # nothing else comes: acked messages stayed acked, nothing came twice
        extra = await c.receive(32, 30.0, await_duration=1.0)
    assert sorted(m.body for m in back) == sorted(unacked)
    assert all(m.reconsume_times == 1 for m in back)
    assert extra == []


def test_blocking_simple_consumer(tmp_path: Path, processes: list[DaemonProcess]) -> None:
    from pymq.client.sync import Producer as SyncProducer
    from pymq.client.sync import SimpleConsumer as SyncSimpleConsumer
    from pymq.errors import InvalidReceiptHandleError

    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    broker = start_broker(tmp_path, ns, processes)
    asyncio.run(create_topic([broker], "jobs", 2))
    asyncio.run(wait_for_route(ns.address, "jobs", 1))
    with SyncProducer(ns.address) as p:
        for i in range(3):
            p.send(Message("jobs", f"s{i}".encode(), tags="x"))
    consumer = SyncSimpleConsumer(ns.address, "sync-workers", await_duration=2.0)
    consumer.subscribe("jobs", "x")
    with consumer:
        got: list[ReceivedMessage] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(consumer.receive(8, 10.0))
        assert sorted(m.body for m in got) == [b"s0", b"s1", b"s2"]
        consumer.change_invisible_duration(got[0], 20.0)
        for m in got:
            consumer.ack(m)
        with pytest.raises(InvalidReceiptHandleError):
            consumer.ack(got[0])
        assert consumer.receive(8, 5.0, await_duration=1.0) == []
