"""The pymq Spark source and sink on a real cluster and a local[2] SparkSession."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pymq.client.queue_reader import QueueReader
from pymq.client.sync import Message, Producer
from tests.helpers import CheckedThread
from tests.spark.streams import run_available_now as drain

pytestmark = pytest.mark.spark


def produce(ns: str, topic: str, n: int, start: int = 0, **kw: Any) -> list[str]:
    with Producer(ns, f"spark-test-{topic}") as p:
        return [
            p.send(Message(topic, f"{topic}-{i}".encode(), keys=[f"k{i}"], **kw)).msg_id
            for i in range(start, start + n)
        ]


def stream(spark, ns: str, topic: str, **options: str):
    reader = spark.readStream.format("pymq").option("namesrv", ns).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def ids_in(spark, path: Path) -> list[str]:
    return [r.msgId for r in spark.read.parquet(str(path)).select("msgId").collect()]


def batch_sizes(q) -> list[int]:
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def data_batches(q, count: int, timeout: float = 90) -> list[dict]:
    """Wait for at least ``count`` micro-batches with rows; return the progress of those batches."""
    deadline = time.monotonic() + timeout
    while True:
        batches = [p for p in q.recentProgress if p["numInputRows"]]
        if len(batches) >= count or time.monotonic() > deadline:
            return batches
        time.sleep(0.05)


def started_at(progress: dict) -> float:
    """A progress entry's trigger start time, in seconds since the epoch."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def run_available_now(spark, df, out: Path, cp: Path) -> Any:
    return drain(df, cp, out=out)


def start_noop(df, checkpoint: Path):  # type: ignore[no-untyped-def]
    """A stream into the noop sink, triggered every 200 ms."""
    return (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_available_now_restart_reads_each_message_once(spark, pymq_cluster, tmp_path: Path) -> None:
    """availableNow, stopped and restarted from its checkpoint while producing goes on: nothing lost, nothing twice."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("an", 2)
    sent = produce(ns, "an", 40)
    out, cp = tmp_path / "out", tmp_path / "cp"
    run_available_now(spark, stream(spark, ns, "an", startingOffsets="earliest"), out, cp)
    assert sorted(ids_in(spark, out)) == sorted(sent)
    sent += produce(ns, "an", 25, start=40)
    run_available_now(spark, stream(spark, ns, "an", startingOffsets="earliest"), out, cp)
    got = ids_in(spark, out)
    assert sorted(got) == sorted(sent) and len(got) == len(set(got))


def test_processing_time_restart_while_producing(spark, pymq_cluster, tmp_path: Path) -> None:
    """A processingTime query keeps up with a producer, and a restart resumes at exactly the next offset.

    The producer must still be sending when each query runs and across the restart (its thread's
    errors fail the test), and each query must have read rows: else the case goes unexercised.
    """
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("pt", 2)
    out, cp = tmp_path / "out", tmp_path / "cp"
    sent: list[str] = []
    stop = threading.Event()

    def producing() -> None:
        i = 0
        while not stop.is_set():
            sent.extend(produce(ns, "pt", 5, start=i))
            i += 5
            time.sleep(0.05)

    def query():
        return (
            stream(spark, ns, "pt", startingOffsets="earliest").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(cp)).trigger(processingTime="1 second").start()
        )  # fmt: skip

    def read_while_producing(q, count: int) -> list[dict]:
        """:func:`data_batches`, given up early if the producer died (its error is raised below)."""
        deadline = time.monotonic() + 90
        while len(batches := [p for p in q.recentProgress if p["numInputRows"]]) < count:
            if time.monotonic() > deadline or not t.is_alive():
                break
            time.sleep(0.05)
        return batches

    t = CheckedThread(producing)
    t.start()
    try:
        q = query()
        # (not a fixed sleep: on a loaded machine a first batch can take longer than the whole old wait)
        first = read_while_producing(q, 2)  # the first query has read while the producer sends
        before_stop = len(sent)
        q.stop()
        time.sleep(1)
        at_restart = len(sent)
        q = query()
        second = read_while_producing(q, 2)  # and so has the restarted one
    finally:
        stop.set()
        t.result(30)
    q.processAllAvailable()
    q.stop()
    got = ids_in(spark, out)
    assert sorted(got) == sorted(sent) and len(got) == len(set(got))
    assert len(first) >= 2 and len(second) >= 2, "a query read no rows while the producer was sending"
    # sends went on while the first query ran, while it was stopped, and after the restart
    assert 0 < before_stop < at_restart < len(sent), (before_stop, at_restart, len(sent))


def test_max_offsets_per_trigger_bounds_batches(spark, pymq_cluster, tmp_path: Path) -> None:
    """maxOffsetsPerTrigger caps every micro-batch, with availableNow too, and all rows still arrive."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("cap", 2)
    sent = produce(ns, "cap", 100)
    q = run_available_now(
        spark,
        stream(spark, ns, "cap", startingOffsets="earliest", maxOffsetsPerTrigger="30"),
        tmp_path / "o",
        tmp_path / "c",
    )
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 4 and max(sizes) <= 30 and sum(sizes) == 100
    assert sorted(ids_in(spark, tmp_path / "o")) == sorted(sent)


def test_min_offsets_per_trigger_holds_small_batches(spark, pymq_cluster, tmp_path: Path) -> None:
    """minOffsetsPerTrigger holds a small backlog until maxTriggerDelay after the last batch; a big one goes at once.

    Asserted on batch contents and on Spark's own trigger times, with wide margins (a loaded
    2-core machine): messages trickled in one by one arrive as one batch, about the delay
    after the previous batch; a backlog of at least the minimum is not held.
    """
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("minb", 2)
    delay = 8.0
    produce(ns, "minb", 60)
    df = stream(spark, ns, "minb", startingOffsets="earliest", minOffsetsPerTrigger="50", maxTriggerDelay="8s")
    q = start_noop(df, tmp_path / "c")
    try:
        first = data_batches(q, 1)
        assert [b["numInputRows"] for b in first] == [60]
        with Producer(ns, "spark-test-minb") as p:
            for i in range(10):  # at most one every 50 ms: unheld, they would spread over several batches
                p.send(Message("minb", b"small-%d" % i))
                time.sleep(0.05)
        second = data_batches(q, 2)
        assert [b["numInputRows"] for b in second] == [60, 10]  # the 10 were held back and read together
        held = started_at(second[1]) - started_at(second[0])
        assert held >= delay - 2, held  # ...until about maxTriggerDelay after the previous batch
        with Producer(ns, "spark-test-minb") as p:  # one request: all 60 become visible at once
            p.send_batch([Message("minb", b"big-%d" % i) for i in range(60)])
        third = data_batches(q, 3)
        assert [b["numInputRows"] for b in third] == [60, 10, 60]
        waited = started_at(third[2]) - started_at(third[1])
        assert waited < delay - 1, waited  # 60 >= 50: no waiting for the delay
    finally:
        q.stop()


def test_max_trigger_delay_counts_from_the_last_batch(spark, pymq_cluster, tmp_path: Path) -> None:
    """maxTriggerDelay runs from the last batch, as in Kafka: the first trigger reads a small backlog at once."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("mindelay", 2)
    produce(ns, "mindelay", 10)  # fewer than minOffsetsPerTrigger, already there when the query starts
    df = stream(spark, ns, "mindelay", startingOffsets="earliest", minOffsetsPerTrigger="50", maxTriggerDelay="10m")
    q = start_noop(df, tmp_path / "c")
    try:
        first = data_batches(q, 1, timeout=60)
        assert [b["numInputRows"] for b in first] == [10]  # not held for 10 minutes after the start
        produce(ns, "mindelay", 10, start=10)
        time.sleep(3)
        assert sum(batch_sizes(q)) == 10  # later small backlogs are held back again
    finally:
        q.stop()


def test_available_now_ignores_min_offsets_per_trigger(spark, pymq_cluster, tmp_path: Path) -> None:
    """availableNow reads all though minOffsetsPerTrigger exceeds the backlog (maxOffsetsPerTrigger still caps)."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("anmin", 2)
    sent = produce(ns, "anmin", 100)
    df = stream(spark, ns, "anmin", startingOffsets="earliest", minOffsetsPerTrigger="1000")
    q = run_available_now(spark, df, tmp_path / "o1", tmp_path / "c1")
    assert batch_sizes(q) == [100]
    assert sorted(ids_in(spark, tmp_path / "o1")) == sorted(sent)
    # With a cap the backlog left after the first batch (40) is below the minimum: still read.
    df = stream(spark, ns, "anmin", startingOffsets="earliest", minOffsetsPerTrigger="50", maxOffsetsPerTrigger="60")
    q = run_available_now(spark, df, tmp_path / "o2", tmp_path / "c2")
    assert batch_sizes(q) == [60, 40]
    assert sorted(ids_in(spark, tmp_path / "o2")) == sorted(sent)


def test_tags_filter_reads_each_match_once(spark, pymq_cluster, tmp_path: Path) -> None:
    """With tags, micro-batches over interleaved tagged messages read every match exactly once and nothing else.

    The broker answers a filtered pull with matches found past the range asked for; the
    reader must drop those, or a batch's last matches come again in the next batch.
    """
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("tagged", 2)
    wanted: list[str] = []
    with Producer(ns, "spark-test-tagged") as p:
        for i in range(90):
            tag = "ABC"[i % 3]
            mid = p.send(Message("tagged", f"tagged-{i}".encode(), tags=tag)).msg_id
            if tag != "B":
                wanted.append(mid)
    df = stream(spark, ns, "tagged", startingOffsets="earliest", tags="A || C", maxOffsetsPerTrigger="10")
    q = run_available_now(spark, df, tmp_path / "o", tmp_path / "c")
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 5  # 90 offsets, at most 10 per batch
    rows = spark.read.parquet(str(tmp_path / "o")).select("msgId", "tags").collect()
    got = [r.msgId for r in rows]
    assert len(got) == len(set(got)), "a message was read twice"
    assert sorted(got) == sorted(wanted) and {r.tags for r in rows} == {"A", "C"}


def test_starting_offsets_latest_reads_only_new_messages(spark, pymq_cluster, tmp_path: Path) -> None:
    """startingOffsets=latest (the stream default) skips what is there at the start; a restart resumes."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("late", 2)
    produce(ns, "late", 15)
    out, cp = tmp_path / "out", tmp_path / "cp"
    q = (
        stream(spark, ns, "late").writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(cp)).trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not q.recentProgress and time.monotonic() < deadline:  # first trigger done: start offsets fixed
            time.sleep(0.05)
        assert q.recentProgress
        new = produce(ns, "late", 12, start=15)
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(ids_in(spark, out)) == sorted(new)
    more = produce(ns, "late", 5, start=27)  # produced while the query is down: the restart must read them
    run_available_now(spark, stream(spark, ns, "late"), out, cp)
    got = ids_in(spark, out)
    assert sorted(got) == sorted(new + more) and len(got) == len(set(got))


def test_batch_ranges_by_offsets_and_timestamp(spark, pymq_cluster) -> None:
    """startingOffsets (JSON), startingTimestamp and endingOffsets select the right ranges in batch reads."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("rng", 1)
    first = produce(ns, "rng", 10)
    time.sleep(0.05)
    middle_ts = int(time.time() * 1000)
    time.sleep(0.05)
    later = produce(ns, "rng", 10, start=10)
    with QueueReader(ns) as reader:
        (queue_a, queue_b) = reader.queues(["rng"])

    def read(**options: str) -> list[str]:
        r = spark.read.format("pymq").option("namesrv", ns).option("topic", "rng")
        for k, v in options.items():
            r = r.option(k, v)
        return sorted(row.msgId for row in r.load().collect())

    assert read() == sorted(first + later)
    assert read(startingTimestamp=str(middle_ts)) == sorted(later)
    spec = f'{{"rng": {{"{queue_a[1]}": {{"0": 2}}, "{queue_b[1]}": {{"0": 3}}}}}}'
    end = f'{{"rng": {{"{queue_a[1]}": {{"0": 4}}, "{queue_b[1]}": {{"0": 3}}}}}}'
    got = spark.read.format("pymq").option("namesrv", ns).option("topic", "rng").option("startingOffsets", spec)
    rows = got.option("endingOffsets", end).load().collect()
    assert [(r.brokerName, r.queueOffset) for r in sorted(rows, key=lambda r: r.queueOffset)] == [
        (queue_a[1], 2),
        (queue_a[1], 3),
    ]


def test_stream_write_and_batch_read_round_trip(spark, pymq_cluster, tmp_path: Path) -> None:
    """Rows streamed into a topic by the sink come back from a batch read with the same bodies, keys and tags."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("src", 2)
    pymq_cluster.create_topic("dst", 2)
    produce(ns, "src", 30, tags="T")
    copy = stream(spark, ns, "src", startingOffsets="earliest").selectExpr("body", "keys", "tags", "properties")
    q = (
        copy.writeStream.format("pymq").option("namesrv", ns).option("topic", "dst")
        .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start()
    )  # fmt: skip
    assert q.awaitTermination(180)
    src = spark.read.format("pymq").option("namesrv", ns).option("topic", "src").load()
    dst = spark.read.format("pymq").option("namesrv", ns).option("topic", "dst").load()

    def shape(df):
        return sorted((bytes(r.body), tuple(r.keys), r.tags) for r in df.collect())

    assert shape(src) == shape(dst) and len(shape(dst)) == 30


def test_batch_write_keeps_a_sharding_key_in_one_queue(spark, pymq_cluster) -> None:
    """The sink sends a shardingKey's rows to one queue, in order; string bodies and topic columns work."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("shard", 4)
    rows = [("shard", f"{key}:{i}", key) for i in range(10) for key in ("alpha", "beta", "gamma")]
    df = spark.createDataFrame(rows, "topic string, body string, shardingKey string")
    df.coalesce(1).write.format("pymq").option("namesrv", ns).mode("append").save()
    back = spark.read.format("pymq").option("namesrv", ns).option("topic", "shard").load().collect()
    by_key: dict[str, set] = {}
    order: dict[str, list[tuple[int, int]]] = {}
    for r in back:
        key, i = bytes(r.body).decode().split(":")
        by_key.setdefault(key, set()).add((r.brokerName, r.queueId))
        order.setdefault(key, []).append((r.queueOffset, int(i)))
    assert all(len(q) == 1 for q in by_key.values()) and len(back) == 30
    assert all([i for _, i in sorted(v)] == list(range(10)) for v in order.values())


def test_fail_on_data_loss(spark, private_cluster, tmp_path: Path) -> None:
    """Offsets deleted by cleanup fail the query with a clear message, or are skipped with failOnDataLoss=false.

    Runs on a cluster of its own: deleting a commitlog file would take other tests' messages with it.
    """
    ns = private_cluster.namesrv
    owner = private_cluster.cluster.brokers[0]
    private_cluster.create_topic("loss", 1)
    with Producer(ns, "spark-loss") as p:
        for i in range(1500):  # ~1.6 MB: more than one 1 MiB commitlog file
            p.send(Message("loss", b"x" * 1000 + str(i).encode()))
    store = owner.store
    assert store.delete_commitlog_files(1) == 1
    store.delete_orphaned_logics()
    lowest = store.min_offset("loss", 0)
    assert lowest > 0
    start = f'{{"loss": {{"{owner.config.broker_name}": {{"0": 0}}}}}}'
    df = stream(spark, ns, "loss", startingOffsets=start)
    with pytest.raises(Exception, match="deleted from the broker"):
        run_available_now(spark, df, tmp_path / "o1", tmp_path / "c1")
    lenient = stream(spark, ns, "loss", startingOffsets=start, failOnDataLoss="false")
    run_available_now(spark, lenient, tmp_path / "o2", tmp_path / "c2")
    offsets = sorted(r.queueOffset for r in spark.read.parquet(str(tmp_path / "o2")).collect())
    assert offsets == list(range(lowest, 1500))


def test_consumer_group_offsets_advance(spark, pymq_cluster, tmp_path: Path) -> None:
    """With consumerGroup set, the broker holds the query's processed offsets (so consumer-progress shows lag)."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("grp", 2)
    produce(ns, "grp", 20)
    df = stream(spark, ns, "grp", startingOffsets="earliest", consumerGroup="spark-pipeline", maxOffsetsPerTrigger="8")
    run_available_now(spark, df, tmp_path / "o", tmp_path / "c")
    with QueueReader(ns) as reader:
        queues = reader.queues(["grp"])
        committed = {q: reader.committed("spark-pipeline", q) for q in queues}
        ends = {q: hi for q, (_, hi) in reader.min_max(queues).items()}
    assert committed == ends and sum(ends.values()) == 20
