"""The pymq Spark source while a broker group's master is away: it reads from the slave, and
the group offsets it reports reach the master once it is back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pymq.client.queue_reader import QueueReader
from pymq.client.sync import Message, Producer
from tests.master_slave import master_and_slave, start_broker
from tests.spark.conftest import ClusterThread
from tests.spark.streams import run_available_now

pytestmark = pytest.mark.spark

TOPIC = "ha"


def produce(ns: str, n: int, start: int = 0) -> list[str]:
    with Producer(ns, "spark-ha") as p:
        return [p.send(Message(TOPIC, f"{TOPIC}-{i}".encode())).msg_id for i in range(start, start + n)]


def ids_in(spark: Any, path: Path) -> list[str]:
    return [r.msgId for r in spark.read.parquet(str(path)).select("msgId").collect()]


def stream(spark: Any, ns: str) -> Any:
    return (
        spark.readStream.format("pymq")
        .option("namesrv", ns)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("consumerGroup", "spark-ha")
        .load()
    )


def test_source_reads_from_the_slave_and_reports_offsets_to_the_returned_master(spark: Any, tmp_path: Path) -> None:
    cluster = ClusterThread(tmp_path / "cluster", brokers=1)
    try:
        ns = cluster.namesrv
        cluster.create_topic(TOPIC, 2)
        sent = produce(ns, 30)
        master, slave = cluster.call(master_and_slave(cluster.cluster, cluster.cluster.brokers[0]))
        cfg = master.config.model_copy(deep=True)
        cfg.port = int(master.address.rpartition(":")[2])
        cluster.call(cluster.cluster.stop_broker(master))  # the route keeps the slave

        out, cp = tmp_path / "out", tmp_path / "cp"
        run_available_now(stream(spark, ns), cp, out=out)
        assert sorted(ids_in(spark, out)) == sorted(sent)  # every message, from the slave
        with QueueReader(ns, timeout=5) as reader:
            keys = reader.queues([TOPIC])
            assert {reader.committed("spark-ha", k) for k in keys} == {-1}  # no master: not committed
        assert [slave.offsets.query("spark-ha", TOPIC, q) for q in range(2)] == [-1, -1]

        master = cluster.call(start_broker(cluster.cluster, cfg))
        sent += produce(ns, 10, start=30)  # on the master only
        run_available_now(stream(spark, ns), cp, out=out)
        got = ids_in(spark, out)
        assert sorted(got) == sorted(sent) and len(got) == len(set(got))
        assert [master.offsets.query("spark-ha", TOPIC, q) for q in range(2)] == [20, 20]
    finally:
        cluster.close()
