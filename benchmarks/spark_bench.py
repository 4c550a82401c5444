"""Rows/s through the pymq Spark source and sink, next to the Python data source API's own ceiling.

    python benchmarks/spark_bench.py --messages 1000000 [--json]

1. Produce N messages of 1 KiB into a topic (8 queues) on an embedded cluster (child process).
2. Ceiling: a trivial in-memory source through the same API (Arrow batches, same row count,
   same partitioning), read with availableNow into the noop sink.
3. Decode floor: the same API, each batch decoded by the connector's decoder from a prebuilt pull
   answer of 4096 stored records (what the source does per batch, without the broker and the pull).
4. pymq source: the topic read with availableNow into the noop sink.
5. pymq sink: a DataFrame of N/4 rows written with df.write.format("pymq").
Each figure is rows / wall seconds of the query (SparkSession start excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pymq.bench.embedded import EmbeddedCluster
from pymq.bench.stats import Recorder
from pymq.bench.workloads import ProducerSpec, ensure_topic, run_producers
from pymq.spark_connector import register


class _Range(InputPartition):
    def __init__(self, n: int) -> None:
        self.n = n


class CeilingStream(DataSourceStreamReader):
    """Yields one prebuilt Arrow batch of the pymq schema again and again: the most the API can move
    for these columns, with nothing fetched or decoded."""

    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options["rows"])
        self.parts = int(options.get("partitions", "8"))

    def initialOffset(self) -> dict:
        return {"o": 0}

    def latestOffset(self) -> dict:
        return {"o": self.rows}

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        n = end["o"] - start["o"]
        return [] if n <= 0 else [_Range(n // self.parts) for _ in range(self.parts)]

    def read(self, partition: _Range):  # type: ignore[no-untyped-def]
        from pymq.protocol.record import encode_properties, encode_record
        from pymq.spark_connector.arrow import records_to_batch

        one = encode_record(b"SparkBench", b"x" * 1024, encode_properties({"UNIQ_KEY": "C0A80001" * 4}))
        batch = records_to_batch([one * 4096], "broker-a")
        for off in range(0, partition.n, 4096):
            yield batch.slice(0, min(4096, partition.n - off))


class DecodeStream(CeilingStream):
    """Yields batches the connector's decoder makes from one prebuilt pull answer, again and again:
    the Spark source's work without the broker and the network (the decode floor)."""

    def read(self, partition: _Range):  # type: ignore[no-untyped-def]
        from pymq.protocol.record import encode_properties, encode_record
        from pymq.spark_connector.arrow import records_to_batch

        one = encode_record(b"SparkBench", b"x" * 1024, encode_properties({"UNIQ_KEY": "C0A80001" * 4}))
        answer = one * 4096
        for off in range(0, partition.n, 4096):
            batch = records_to_batch([answer], "broker-a")
            yield batch if partition.n - off >= 4096 else batch.slice(0, partition.n - off)


class CeilingSource(DataSource):
    #: the stream reader this source hands out
    stream: type[CeilingStream] = CeilingStream

    @classmethod
    def name(cls) -> str:
        return "ceiling"

    def schema(self) -> str:
        from pymq.spark_connector.options import SCHEMA_DDL

        return SCHEMA_DDL

    def streamReader(self, schema):  # type: ignore[no-untyped-def]
        return self.stream(self.options)


class DecodeSource(CeilingSource):
    stream = DecodeStream

    @classmethod
    def name(cls) -> str:
        return "decodefloor"


def timed_available_now(spark: SparkSession, df, tmp: str) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    q = (
        df.writeStream.format("noop")
        .option("checkpointLocation", tempfile.mkdtemp(dir=tmp))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    secs = time.perf_counter() - t0
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    return rows / secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = args.messages
    tmp = tempfile.mkdtemp(prefix="pymq-spark-bench-")
    try:
        result = _run(n, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # (the checkpoints)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v}")


def _run(n: int, tmp: str) -> dict[str, float | int]:
    with EmbeddedCluster() as cluster:
        ns = cluster.namesrv

        async def fill() -> None:
            await ensure_topic(ns, "SparkBench", 8)
            await run_producers(
                ProducerSpec(ns, "SparkBench", 1024, batch_size=64, count=n, concurrency=4),
                [Recorder(1024) for _ in range(4)],
            )

        asyncio.run(fill())
        spark = (
            SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC").config("spark.log.structuredLogging.enabled", "false")
            .config("spark.driver.memory", "2g").getOrCreate()
        )  # fmt: skip
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(CeilingSource)
        spark.dataSource.register(DecodeSource)
        # Warm up the JVM and the Python workers once.
        timed_available_now(spark, spark.readStream.format("ceiling").option("rows", "50000").load(), tmp)
        ceiling = timed_available_now(spark, spark.readStream.format("ceiling").option("rows", str(n)).load(), tmp)
        decoded = timed_available_now(spark, spark.readStream.format("decodefloor").option("rows", str(n)).load(), tmp)
        source_df = (
            spark.readStream.format("pymq").option("namesrv", ns).option("topic", "SparkBench")
            .option("startingOffsets", "earliest").load()
        )  # fmt: skip
        source = timed_available_now(spark, source_df, tmp)
        sink_rows = n // 4
        df = spark.range(sink_rows).selectExpr("'SparkSinkBench' as topic", "repeat('x', 1024) as body")
        asyncio.run(ensure_topic(ns, "SparkSinkBench", 8))
        t0 = time.perf_counter()
        df.write.format("pymq").option("namesrv", ns).mode("append").save()
        sink = sink_rows / (time.perf_counter() - t0)
        spark.stop()
    return {
        "messages": n,
        "ceiling_rows_per_sec": round(ceiling),
        "source_rows_per_sec": round(source),
        "source_vs_ceiling": round(source / ceiling, 2),
        "decode_floor_rows_per_sec": round(decoded),
        "decode_floor_vs_ceiling": round(decoded / ceiling, 2),
        "sink_rows": sink_rows,
        "sink_rows_per_sec": round(sink),
    }


if __name__ == "__main__":
    main()
