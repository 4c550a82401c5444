"""Consumers and readers around a broker group of a master and a slave holding the same data.

While the master is gone from the route, push (concurrent and orderly) and pull consumers
and the queue reader read from the slave; offsets committed meanwhile stay in the client
and reach the master when it is back; orderly queues pause without the master's locks.
Pulls follow the broker's suggestion to read from the slave when far behind.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer, PushConsumer
from pymq.client.queue_reader import QueueReader
from pymq.protocol.message import MessageExt, iter_messages
from pymq.testing import LocalCluster, capture_logs
from tests.helpers import wait_until
from tests.master_slave import (
    OrderlyLog,
    collect_bodies,
    fast_client_options,
    master_and_slave,
    slow_consumer,
    start_broker,
    wait_for_group,
)

pytestmark = pytest.mark.integration

TOPIC = "t"
FAST = fast_client_options(interval=0.5, persist=0.2)


async def produce(cluster: LocalCluster, n: int, prefix: str, size: int = 0) -> None:
    async with Producer(cluster.namesrv_addr, f"p-{prefix}") as producer:
        for i in range(n):
            body = f"{prefix}-{i}".encode()
            await producer.send(Message(TOPIC, body + b"." * max(0, size - len(body))))


async def group_with_slave(tmp_path: Path, messages: int, size: int = 0, **slave: Any) -> tuple[LocalCluster, Any, Any]:
    cluster = LocalCluster(tmp_path / "c")
    await cluster.start()
    await cluster.create_topic(TOPIC, 2)
    await produce(cluster, messages, "old", size)
    master, slave_app = await master_and_slave(cluster, cluster.brokers[0], **slave)
    return cluster, master, slave_app


async def stop_master(cluster: LocalCluster, master: Any) -> Any:
    """Stop the master (it unregisters: the route keeps the slave); returns its config for the restart."""
    cfg = master.config.model_copy(deep=True)
    cfg.port = int(master.address.rpartition(":")[2])
    await cluster.stop_broker(master)
    return cfg


def committed(broker: Any, group: str) -> list[int]:
    return [broker.offsets.query(group, TOPIC, q) for q in range(2)]


async def test_push_consumer_reads_from_the_slave_while_the_master_is_away_and_returns(
    tmp_path: Path, pulled_from: list[str]
) -> None:
    # A pull held on the slave when the master returns is answered within 1 s (not 15).
    cluster, master, slave = await group_with_slave(tmp_path, 40, long_polling_max_seconds=1.0)
    try:
        seen: list[bytes] = []
        c = slow_consumer(cluster.namesrv_addr, "g", "c1", TOPIC, **FAST)
        collect_bodies(c, seen, pause=0.02)

        async with c:
            await wait_until(lambda: len(seen) >= 6, what="some consumed from the master")
            master_addr = master.address
            cfg = await stop_master(cluster, master)
            away_from = len(pulled_from)
            await wait_until(lambda: len(set(seen)) == 40, timeout=30, what="every old message")
            assert slave.address in pulled_from[away_from:]  # the rest came from the slave
            # Commits while the master is away stay in the client; the slave takes none.
            await wait_until(lambda: sorted(c.offset_store.table.values()) == [20, 20], what="offsets in memory")
            assert committed(slave, "g") == [-1, -1]

            master = await start_broker(cluster, cfg)
            await wait_for_group(cluster, cfg.broker_name, {0: master.address, 1: slave.address})
            await wait_until(lambda: committed(master, "g") == [20, 20], timeout=20, what="offsets on the master")
            back_from = len(pulled_from)
            await produce(cluster, 10, "new")  # on the master only (no live replication here)
            await wait_until(lambda: len(set(seen)) == 50, timeout=20, what="new messages from the master")
            assert master.address == master_addr and master_addr in pulled_from[back_from:]
        assert not [b for b, n in Counter(seen).items() if n > 1]  # nothing twice
    finally:
        await cluster.close()


async def test_pull_consumer_and_queue_reader_read_from_the_slave(tmp_path: Path) -> None:
    cluster, master, slave = await group_with_slave(tmp_path, 20)
    try:
        await stop_master(cluster, master)
        consumer = PullConsumer(
            cluster.namesrv_addr, "pg", instance_name="pc", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST
        )
        consumer.subscribe(TOPIC)
        got: list[bytes] = []
        async with consumer:
            while len(got) < 20:
                batch = await consumer.poll(10)
                assert batch, "poll returned nothing from the slave"
                got.extend(m.body for m in batch)
            await consumer.persist_offsets()
            assert sorted(consumer.offset_store.table.values()) == [10, 10]  # kept, not on the slave
            assert committed(slave, "pg") == [-1, -1]
        assert sorted(got) == sorted(f"old-{i}".encode() for i in range(20))

        def read() -> None:  # the reader is blocking: it runs its own loop, in a thread here
            with QueueReader(cluster.namesrv_addr, timeout=5) as reader:
                keys = reader.queues([TOPIC])
                assert [k[1] for k in keys] == ["broker-a", "broker-a"]
                assert reader.min_max(keys) == {k: (0, 10) for k in keys}
                chunks = [chunk for k in keys for chunk, _ in reader.read_range(k, 0, 10)]
                assert sorted(m.body for c in chunks for m in iter_messages(c)) == sorted(got)
                # Not dropped silently: the caller learns which ones to keep and commit later.
                assert reader.commit("spark", {keys[0]: 10}) == [keys[0]]
                assert reader.committed("spark", keys[0]) == -1  # the slave's copy

        await asyncio.to_thread(read)
    finally:
        await cluster.close()


async def test_pulls_follow_the_suggestion_to_the_slave_and_back(tmp_path: Path, pulled_from: list[str]) -> None:
    """Far behind (past slave_read_lag_bytes), the master sends the consumer to the slave; once
    caught up the slave sends it back. With follow_pull_suggestion off it stays on the master."""
    cluster, master, slave = await group_with_slave(tmp_path, 40, size=1000)
    try:
        for b in (master, slave):
            b.update_runtime_config({"slave_read_enable": True, "slave_read_lag_bytes": 8000})
        for group, follow in (("follows", True), ("stays", False)):
            pulled_from.clear()
            seen: list[bytes] = []
            c = PushConsumer(
                cluster.namesrv_addr,
                group,
                instance_name=group,
                consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                pull_batch_size=2,
                follow_pull_suggestion=follow,
                **FAST,
            )
            c.subscribe(TOPIC)

            @c.listener
            async def on(msgs: list[MessageExt], seen: list[bytes] = seen) -> None:
                seen.extend(m.body[:6] for m in msgs)

            async with c:
                await wait_until(lambda seen=seen: len(seen) == 40, timeout=20, what=f"{group}: all consumed")
                assert len(set(seen)) == 40
                if follow:
                    assert pulled_from[0] == master.address and slave.address in pulled_from
                    # Caught up: the last answers sent every queue back to the master.
                    assert c.pull_nodes.table == {}
                else:
                    assert set(pulled_from) == {master.address}
    finally:
        await cluster.close()


async def test_orderly_consumer_pauses_without_the_master_and_resumes_when_it_is_back(tmp_path: Path) -> None:
    cluster, master, _ = await group_with_slave(tmp_path, 40)
    try:
        c = slow_consumer(
            cluster.namesrv_addr, "og", "o1", TOPIC, lock_renew_interval=0.2, lock_valid_seconds=0.6, **FAST
        )
        log = OrderlyLog(c)
        total = log.total

        async with c:
            await wait_until(lambda: total() >= 6, what="some consumed under the master's locks")
            cfg = await stop_master(cluster, master)
            paused_at = await log.paused(TOPIC)
            assert paused_at < 40
            assert sorted(mq.queueId for mq in c.process_queues if mq.topic == TOPIC) == [0, 1]  # kept, paused
            # A member joining meanwhile is allotted a queue, but the owner does not give it up
            # (no commit, no unlock without the master) and the newcomer cannot lock it.
            c2 = PushConsumer(cluster.namesrv_addr, "og", instance_name="o2", lock_renew_interval=0.2, **FAST)
            c2.subscribe(TOPIC)
            c2.orderly_listener(log.on)
            with capture_logs("pymq.client") as logs:
                async with c2:
                    await wait_until(
                        lambda: any(e["event"] == "queue_release_deferred" for e in logs),
                        what="the owner deferring the release of the newcomer's queue",
                    )
                    await asyncio.sleep(1.0)  # two more rebalances of each
                    assert [mq for mq in c2.process_queues if mq.topic == TOPIC] == []
                    assert sorted(mq.queueId for mq in c.process_queues if mq.topic == TOPIC) == [0, 1]
                    assert total() == paused_at

            master = await start_broker(cluster, cfg)
            await wait_until(lambda: total() >= 40, timeout=20, what="consumption resumed")
            await wait_until(lambda: committed(master, "og") == [20, 20], timeout=20, what="offsets on the master")
        assert log.consumed == {0: list(range(20)), 1: list(range(20))}
    finally:
        await cluster.close()
