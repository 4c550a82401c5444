"""kill -9 a master on real daemons: consumers go on from its slave, producers fail over to the
other broker group; the restarted master serves the consumers again and gets the offsets they
committed while it was down."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.requests import QueryConsumerOffsetRequest
from pymq.protocol.route import MessageQueue
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from tests.daemon_helpers import wait_for_route
from tests.helpers import wait_until, wait_until_async
from tests.master_slave import (
    OrderlyLog,
    collect_bodies,
    fast_client_options,
    group_addrs,
    master_and_slave_daemons,
    slow_consumer,
)

pytestmark = pytest.mark.integration

TOPIC = "killed"
FAST = fast_client_options(interval=1.0, persist=0.3)


async def create_topic(namesrv: str, addrs: list[str], queues: int = 2) -> None:
    async with RpcClient() as rpc:
        for addr in addrs:
            ext = {"topic": TOPIC, "readQueueNums": queues, "writeQueueNums": queues}
            await rpc.invoke_ok(addr, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
    # the brokers register the topic with the nameserver asynchronously: a first send could find no route
    await wait_for_route(namesrv, TOPIC, len(addrs))


async def committed_on(addr: str, group: str, queues: int = 2) -> list[int]:
    out = []
    async with RpcClient() as rpc:
        for q in range(queues):
            ext = QueryConsumerOffsetRequest(consumer_group=group, topic=TOPIC, queue_id=q).to_ext()
            resp = await rpc.invoke(addr, Command.request(RequestCode.QUERY_CONSUMER_OFFSET, ext), 5.0)
            out.append(int(resp.ext.get("offset", -1)) if resp.code == 0 else -1)
    return out


async def has_committed(addr: str, group: str, offsets: list[int]) -> bool:
    return await committed_on(addr, group) == offsets


async def routed(ns: str, broker: str, ids: set[int]) -> bool:
    return set(await group_addrs(ns, TOPIC, broker)) == ids


async def test_kill_master_consumers_use_the_slave_producers_fail_over_offsets_reach_the_restarted_master(
    tmp_path: Path, processes: list[DaemonProcess], pulled_from: list[str]
) -> None:
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    a = broker_process(tmp_path, ns.address, "broker-a").start()
    processes.append(a)
    b = broker_process(tmp_path, ns.address, "broker-b").start()
    processes.append(b)
    await create_topic(ns.address, [a.address, b.address])
    async with Producer(ns.address, "kp", **FAST) as producer:
        for i in range(60):
            await producer.send(Message(TOPIC, f"old-{i}".encode()), queue=MessageQueue(TOPIC, "broker-a", i % 2))
    # A held pull on the slave is answered within 1 s once the master is back (not 15).
    a, slave = master_and_slave_daemons(a, processes=processes, slave_env={"PYMQ_LONG_POLLING_MAX_SECONDS": "1"})
    await wait_until_async(lambda: routed(ns.address, "broker-a", {0, 1}), what="broker-a routed with its slave")

    seen: list[bytes] = []
    c = slow_consumer(ns.address, "kg", "kc", TOPIC, **FAST)
    collect_bodies(c, seen, pause=0.05)

    async with c, Producer(ns.address, "kp2", **FAST) as producer:
        await wait_until(lambda: len(seen) >= 8, timeout=20, what="consuming from the master")
        a.kill()  # SIGKILL: no unregistration; the nameserver sees the connection drop
        killed_at = len(pulled_from)

        # Producers: every send succeeds, on broker-b (broker-a has no master).
        sent = [await producer.send(Message(TOPIC, f"new-{i}".encode())) for i in range(20)]
        assert {r.message_queue.brokerName for r in sent} == {"broker-b"}

        # Consumers: the old messages left on broker-a are read from its slave.
        await wait_until(lambda: len(set(seen)) == 80, timeout=30, what="old messages from the slave, new from b")
        assert slave.address in pulled_from[killed_at:]
        await wait_until(
            lambda: [c.offset_store.table.get(MessageQueue(TOPIC, "broker-a", q)) for q in range(2)] == [30, 30],
            what="broker-a offsets held by the client",
        )
        assert await committed_on(slave.address, "kg") != [30, 30]  # the slave is no source of truth

        # The master comes back (same store, a new port): offsets committed meanwhile reach it,
        # and new messages on it are consumed from it.
        restarted = DaemonProcess("broker", list(a.args), a.workdir, env=a.env).start()
        processes.append(restarted)
        await wait_until_async(
            lambda: has_committed(restarted.address, "kg", [30, 30]), timeout=30, what="offsets on the restarted master"
        )
        back_at = len(pulled_from)
        for i in range(10):
            await producer.send(Message(TOPIC, f"back-{i}".encode()), queue=MessageQueue(TOPIC, "broker-a", i % 2))
        await wait_until(lambda: len(set(seen)) == 90, timeout=30, what="messages on the restarted master")
        assert restarted.address in pulled_from[back_at:]
    assert not [m for m, n in Counter(seen).items() if n > 1]


async def test_kill_master_orderly_consumer_pauses_and_resumes_on_the_restarted_master(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    """Locks die with the master: consumption pauses (no lock can be had from the slave) and
    resumes under new locks on the restarted master, every queue in order, nothing twice."""
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    a = broker_process(tmp_path, ns.address, "broker-a").start()
    processes.append(a)
    await create_topic(ns.address, [a.address])
    async with Producer(ns.address, "op", **FAST) as producer:
        for i in range(40):
            await producer.send(Message(TOPIC, f"o-{i}".encode()), queue=MessageQueue(TOPIC, "broker-a", i % 2))
    a, _ = master_and_slave_daemons(a, processes=processes, slave_env={"PYMQ_LONG_POLLING_MAX_SECONDS": "1"})
    await wait_until_async(lambda: routed(ns.address, "broker-a", {0, 1}), what="broker-a routed with its slave")

    c = slow_consumer(ns.address, "og", "oc", TOPIC, lock_renew_interval=0.3, lock_valid_seconds=0.9, **FAST)
    log = OrderlyLog(c)
    async with c:
        await wait_until(lambda: log.total() >= 6, timeout=20, what="consuming under the master's locks")
        a.kill()
        assert await log.paused(TOPIC) < 40  # three renewals: no lock anywhere, nothing consumed

        restarted = DaemonProcess("broker", list(a.args), a.workdir, env=a.env).start()
        processes.append(restarted)
        await wait_until(lambda: log.total() >= 40, timeout=30, what="consumption resumed on the restarted master")
        await wait_until_async(
            lambda: has_committed(restarted.address, "og", [20, 20]), timeout=20, what="offsets on the restarted master"
        )
    assert log.consumed == {0: list(range(20)), 1: list(range(20))}
