"""The pymq source and sink at their edges: empty reads, bad offsets, save modes, Kafka-style options."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pymq.client.queue_reader import QueueReader
from pymq.client.sync import Message, Producer
from pymq.spark_connector import offsets_behind_latest
from pymq.spark_connector.offsets import to_json
from tests.spark.streams import run_available_now

pytestmark = pytest.mark.spark


def produce(ns: str, topic: str, n: int, start: int = 0) -> list[str]:
    with Producer(ns, f"spark-edge-{topic}") as p:
        return [p.send(Message(topic, f"{topic}-{i}".encode())).msg_id for i in range(start, start + n)]


def batch(spark, ns: str, topic: str, **options: str):
    r = spark.read.format("pymq").option("namesrv", ns).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def queues_of(ns: str, topic: str) -> list[tuple[str, str, int]]:
    with QueueReader(ns) as reader:
        return reader.queues([topic])


def now_ms() -> int:
    time.sleep(0.05)  # messages before and after get store times on either side
    ms = int(time.time() * 1000)
    time.sleep(0.05)
    return ms


def test_empty_batch_reads_return_no_rows(spark, pymq_cluster) -> None:
    """Nothing to read (empty topic, a future startingTimestamp, an empty range) gives 0 rows, not an AttributeError."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("void", 2)
    assert batch(spark, ns, "void").collect() == []
    pymq_cluster.create_topic("some", 1)
    produce(ns, "some", 6)
    assert batch(spark, ns, "some", startingTimestamp=str(int(time.time() * 1000) + 3_600_000)).collect() == []
    with QueueReader(ns) as reader:
        ends = json.dumps(to_json({q: hi for q, (_, hi) in reader.min_max(reader.queues(["some"])).items()}))
    assert batch(spark, ns, "some", startingOffsets=ends).count() == 0
    assert len(batch(spark, ns, "some", startingOffsets="earliest").collect()) == 6
    here = json.dumps(to_json({q: 0 for q in queues_of(ns, "some")}))
    assert batch(spark, ns, "some", startingOffsets=here, endingOffsets=here).collect() == []


def test_bad_start_offsets_fail_like_kafka(spark, pymq_cluster) -> None:
    """A start past a queue's end, or offsets JSON leaving queues out, is an error (it read 0 rows / from earliest)."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("bad-start", 1)
    produce(ns, "bad-start", 4)
    queues = queues_of(ns, "bad-start")
    past = json.dumps(to_json({q: 1000 for q in queues}))
    with pytest.raises(Exception, match="past the queue's end"):
        batch(spark, ns, "bad-start", startingOffsets=past).collect()
    partial = json.dumps(to_json({queues[0]: 0}))
    with pytest.raises(Exception, match="must give every queue"):
        batch(spark, ns, "bad-start", startingOffsets=partial).collect()
    with pytest.raises(Exception, match=r"(?i)unknown option 'startingOffset'"):
        batch(spark, ns, "bad-start", startingOffset="earliest").collect()


def test_save_modes(spark, pymq_cluster) -> None:
    """append writes; overwrite is refused (a topic cannot be truncated); the default mode fails with Spark's error."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("modes", 1)
    df = spark.createDataFrame([("a",), ("b",)], "body string")
    df.write.format("pymq").option("namesrv", ns).option("topic", "modes").mode("append").save()
    assert len(batch(spark, ns, "modes").collect()) == 2
    with pytest.raises(Exception, match="only appends"):
        df.write.format("pymq").option("namesrv", ns).option("topic", "modes").mode("overwrite").save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("pymq").option("namesrv", ns).option("topic", "modes").save()
    assert len(batch(spark, ns, "modes").collect()) == 2


def test_offsets_by_timestamp(spark, pymq_cluster) -> None:
    """startingOffsetsByTimestamp, endingTimestamp and endingOffsetsByTimestamp pick the ranges by store time."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("bytime", 1)
    first = produce(ns, "bytime", 8)
    t1 = now_ms()
    middle = produce(ns, "bytime", 8, start=8)
    t2 = now_ms()
    last = produce(ns, "bytime", 8, start=16)
    queues = queues_of(ns, "bytime")

    def ids(**options: str) -> list[str]:
        return sorted(r.msgId for r in batch(spark, ns, "bytime", **options).select("msgId").collect())

    by_t1 = json.dumps(to_json({q: t1 for q in queues}))
    by_t2 = json.dumps(to_json({q: t2 for q in queues}))
    assert ids(startingOffsetsByTimestamp=by_t1) == sorted(middle + last)
    assert ids(endingTimestamp=str(t1)) == sorted(first)
    assert ids(startingOffsetsByTimestamp=by_t1, endingOffsetsByTimestamp=by_t2) == sorted(middle)
    assert ids(startingTimestamp=str(t1), endingTimestamp=str(t2)) == sorted(middle)
    with pytest.raises(Exception, match="before the starting offset"):
        ids(startingTimestamp=str(t2), endingTimestamp=str(t1))


def test_subscribe_pattern_picks_up_new_topics(spark, pymq_cluster, tmp_path: Path) -> None:
    """subscribePattern reads every matching topic, and a matching topic created while the query runs."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("pat-one", 2)
    pymq_cluster.create_topic("nopat-x", 1)
    sent = produce(ns, "pat-one", 10)
    produce(ns, "nopat-x", 3)
    out = tmp_path / "out"
    df = (
        spark.readStream.format("pymq").option("namesrv", ns).option("subscribePattern", "pat-.*")
        .option("startingOffsets", "earliest").load()
    )  # fmt: skip
    q = (
        df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="300 milliseconds").start()
    )  # fmt: skip
    try:
        q.processAllAvailable()
        pymq_cluster.create_topic("pat-two", 2)
        sent += produce(ns, "pat-two", 5)
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.read.parquet(str(out)).select("topic", "msgId").collect()
    assert sorted(r.msgId for r in rows) == sorted(sent) and {r.topic for r in rows} == {"pat-one", "pat-two"}


def test_offsets_behind_latest_per_trigger(spark, pymq_cluster, tmp_path: Path) -> None:
    """Each trigger's progress carries the latest offsets, from which Kafka's lag metrics are computed."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("lagging", 2)
    produce(ns, "lagging", 40)
    df = (
        spark.readStream.format("pymq").option("namesrv", ns).option("topic", "lagging")
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10").load()
    )  # fmt: skip
    q = run_available_now(df, tmp_path / "c")
    lags = [offsets_behind_latest(p["sources"][0]) for p in q.recentProgress if p["numInputRows"]]
    assert len(lags) >= 4
    assert lags[0]["maxOffsetsBehindLatest"] >= 5 and lags[0]["avgOffsetsBehindLatest"] > 0
    assert lags[-1] == {"minOffsetsBehindLatest": 0.0, "maxOffsetsBehindLatest": 0.0, "avgOffsetsBehindLatest": 0.0}


def test_group_id_prefix_reports_lag_under_a_generated_group(spark, pymq_cluster, tmp_path: Path) -> None:
    """groupIdPrefix: the query's processed offsets land under one group named <prefix>-<random>."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("prefixed", 2)
    produce(ns, "prefixed", 12)
    df = (
        spark.readStream.format("pymq").option("namesrv", ns).option("topic", "prefixed")
        .option("startingOffsets", "earliest").option("groupIdPrefix", "etl-job").load()
    )  # fmt: skip
    run_available_now(df, tmp_path / "c")
    groups = {
        key.partition("@")[2]: offsets
        for broker in pymq_cluster.cluster.brokers
        for key, offsets in broker.offsets.table.items()
        if key.startswith("prefixed@")
    }
    assert len(groups) == 1, groups
    (name,) = groups
    assert name.startswith("etl-job-") and len(name) > len("etl-job-")
    committed = sum(
        o
        for b in pymq_cluster.cluster.brokers
        for k, v in b.offsets.table.items()
        if k.endswith(name)
        for o in v.values()
    )
    assert committed == 12
