"""The pymq source while brokers leave and return: real daemons, every position exactly once.

A broker that stops gracefully leaves the route; one that is frozen stays in it but cannot
answer. Either way its queues must keep their offsets in the checkpoint and resume there,
and the query must not fail while the broker is away.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from pathlib import Path

import pytest

from pymq.client.queue_reader import QueueReader
from pymq.client.sync import Message, Producer
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.route import MessageQueue
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "moving"


async def _create_topic(addrs: list[str], topic: str, queues: int) -> None:
    async with RpcClient() as rpc:
        for addr in addrs:
            ext = {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues}
            await rpc.invoke_ok(addr, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))


def brokers_routed(ns: str) -> set[str]:
    with QueueReader(ns, timeout=5) as reader:
        try:
            return {broker for _, broker, _ in reader.queues([TOPIC])}
        except Exception:
            return set()


def wait_for(check, what: str, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce_to(ns: str, broker: str, n: int, tag: str) -> list[str]:
    """``n`` messages into the two queues of one broker (explicit queues: no retry on the other broker)."""
    with Producer(ns, f"route-test-{tag}") as p:
        return [
            p.send(Message(TOPIC, f"{tag}-{i}".encode()), queue=MessageQueue(TOPIC, broker, i % 2)).msg_id
            for i in range(n)
        ]


def start_broker(tmp_path: Path, ns: str, name: str, processes: list[DaemonProcess]) -> DaemonProcess:
    b = broker_process(tmp_path, ns, name).start()
    processes.append(b)
    return b


def test_broker_leaving_and_returning_reads_every_position_once(
    spark, tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    """2 brokers x 400 messages; broker-b stopped (leaves the route) and restarted, then frozen (in the route,
    not answering) and thawed, while a streaming query runs: the query never fails, and every position
    (broker, queue, offset) is in the output exactly once. Before the fix, b's queues were dropped from
    the checkpoint while it was away and re-read from offset 0 when it returned."""
    ns_proc = namesrv_process(tmp_path).start()
    processes.append(ns_proc)
    ns = ns_proc.address
    broker_a = start_broker(tmp_path, ns, "broker-a", processes)
    broker_b = start_broker(tmp_path, ns, "broker-b", processes)
    asyncio.run(_create_topic([broker_a.address, broker_b.address], TOPIC, 2))
    wait_for(lambda: brokers_routed(ns) == {"broker-a", "broker-b"}, "the topic on both brokers")
    sent = produce_to(ns, "broker-a", 400, "a0") + produce_to(ns, "broker-b", 400, "b0")

    out, cp = tmp_path / "out", tmp_path / "cp"
    df = (
        spark.readStream.format("pymq").option("namesrv", ns).option("topic", TOPIC)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300")
        .option("pollTimeoutMs", "2000")
        .load()
    )  # fmt: skip
    q = (
        df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(cp))
        .trigger(processingTime="300 milliseconds").start()
    )  # fmt: skip
    try:
        q.processAllAvailable()

        # 1. graceful stop: broker-b unregisters and leaves the route; the query goes on with broker-a
        broker_b.stop()
        wait_for(lambda: brokers_routed(ns) == {"broker-a"}, "broker-b to leave the route")
        sent += produce_to(ns, "broker-a", 50, "a1")
        q.processAllAvailable()
        time.sleep(1)  # a few more triggers without broker-b
        broker_b = start_broker(tmp_path, ns, "broker-b", processes)  # same store, new port
        wait_for(lambda: brokers_routed(ns) == {"broker-a", "broker-b"}, "broker-b to return")
        sent += produce_to(ns, "broker-b", 50, "b1")
        q.processAllAvailable()

        # 2. frozen: broker-b stays in the route but does not answer (requests time out)
        broker_b.signal(signal.SIGSTOP)
        try:
            sent += produce_to(ns, "broker-a", 50, "a2")
            q.processAllAvailable()
            time.sleep(3)  # triggers that find broker-b unavailable
            assert q.exception() is None and q.isActive
        finally:
            broker_b.signal(signal.SIGCONT)
        sent += produce_to(ns, "broker-b", 50, "b2")
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.read.parquet(str(out)).select("brokerName", "queueId", "queueOffset", "msgId").collect()
    positions = [(r.brokerName, r.queueId, r.queueOffset) for r in rows]
    assert len(positions) == len(set(positions)), f"{len(positions) - len(set(positions))} positions read twice"
    assert sorted(r.msgId for r in rows) == sorted(sent) and len(sent) == 1000


def test_broker_offsets_going_back_is_data_loss(spark, private_cluster, tmp_path: Path) -> None:
    """A broker back with a replaced (empty) store: failOnDataLoss fails the query saying so; with false the query
    keeps its offset and reads on from there, never re-reading from below (skipping what lies below it)."""
    ns = private_cluster.namesrv
    private_cluster.create_topic("wiped", 1)
    with Producer(ns, "wiped-p") as p:
        for i in range(20):
            p.send(Message("wiped", b"old-%d" % i))
    out, cp = tmp_path / "out", tmp_path / "cp"

    def run(**options: str) -> None:
        df = spark.readStream.format("pymq").option("namesrv", ns).option("topic", "wiped")
        for k, v in {"startingOffsets": "earliest", **options}.items():
            df = df.option(k, v)
        q = (
            df.load().writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(cp))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        try:
            assert q.awaitTermination(180)
        finally:
            q.stop()

    run()
    cluster = private_cluster.cluster
    old = cluster.brokers[0]
    store_dir = Path(old.config.store.store_dir)
    private_cluster.call(cluster.stop_broker(old))
    shutil.rmtree(store_dir)
    private_cluster.call(cluster.add_broker(0, store={"commitlog_file_size": 1 << 20}))
    private_cluster.create_topic("wiped", 1)
    with Producer(ns, "wiped-p") as p:
        for i in range(5):
            p.send(Message("wiped", b"new-%d" % i))
    with pytest.raises(Exception, match="went back from 20 to 5"):
        run()
    run(failOnDataLoss="false")  # stays at 20: nothing to read yet
    with Producer(ns, "wiped-p") as p:
        for i in range(5, 25):
            p.send(Message("wiped", b"new-%d" % i))
    run(failOnDataLoss="false")
    rows = spark.read.parquet(str(out)).select("queueOffset", "body").collect()
    offsets = sorted(r.queueOffset for r in rows)
    assert offsets == list(range(20)) + list(range(20, 25))
    assert sorted(bytes(r.body) for r in rows if r.queueOffset >= 20) == sorted(b"new-%d" % i for i in range(20, 25))
