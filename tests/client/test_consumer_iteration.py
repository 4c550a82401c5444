"""Iterating consumers: ``async for`` over the pull consumer and its batches, and the blocking facade."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pymq.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer, SendResult, sync
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


async def send(cluster: LocalCluster, n: int) -> set[str]:
    async with Producer(cluster.namesrv_addr) as producer:
        return {(await producer.send(Message("orders", f"m{i}".encode()))).msg_id for i in range(n)}


def consumer(cluster: LocalCluster, group: str) -> PullConsumer:
    c = PullConsumer(cluster.namesrv_addr, group, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    c.subscribe("orders")
    return c


async def test_async_for_yields_messages(cluster: LocalCluster) -> None:
    await cluster.create_topic("orders", 2)
    sent = await send(cluster, 6)
    got: set[str] = set()
    async with consumer(cluster, "iter") as c:
        async for msg in c:
            assert isinstance(msg, MessageExt)
            got.add(msg.msg_id)
            if got == sent:
                break
    assert got == sent


async def test_batches_end_when_the_consumer_closes(cluster: LocalCluster) -> None:
    """``async for batch in consumer.batches()`` yields non-empty batches and stops once close() ran."""
    await cluster.create_topic("orders", 2)
    sent = await send(cluster, 4)
    c = await consumer(cluster, "batches").start()
    got: set[str] = set()
    first = asyncio.Event()

    async def read() -> None:
        async for batch in c.batches(timeout=0.2):
            assert batch
            got.update(m.msg_id for m in batch)
            if got == sent:
                first.set()

    reader = asyncio.ensure_future(read())
    await asyncio.wait_for(first.wait(), 20)
    await c.close()
    await asyncio.wait_for(reader, 5)  # the loop ended by itself
    assert got == sent


async def test_sync_facade_is_typed_and_iterable(cluster: LocalCluster) -> None:
    """The blocking producer returns SendResults; iterating the blocking pull consumer yields the messages,
    and a close() from another thread ends the iteration."""
    await cluster.create_topic("orders", 2)

    def blocking() -> tuple[set[str], set[str], bool]:
        with sync.Producer(cluster.namesrv_addr, "sync-p") as producer:
            results = [producer.send(Message("orders", f"s{i}".encode())) for i in range(5)]
        assert all(isinstance(r, SendResult) for r in results)
        sent = {r.msg_id for r in results}
        c = sync.PullConsumer(cluster.namesrv_addr, "sync-iter", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe("orders")
        got: set[str] = set()
        with c:
            assert len(c.assigned_queues()) == 2
            for msg in c:
                got.add(msg.msg_id)
                if got == sent:
                    break
            closer = threading.Timer(0.5, c.close)
            closer.start()
            ended = all(True for _ in c)  # blocks until the timer closes the consumer
            closer.join()
        return sent, got, ended

    sent, got, ended = await asyncio.wait_for(asyncio.to_thread(blocking), 60)
    assert got == sent and ended
