"""Count messages per tag per minute from a pymq topic, into Parquet and into another pymq topic.

Run against the local cluster from the README (``pymq-local`` on 127.0.0.1:9876):

    python examples/spark_tag_counts.py --topic orders --out /tmp/tag-counts

Counts are computed per one-minute window of the messages' store time with a two-minute
watermark; each window is written once it is final (append mode): to Parquet under
``--out/parquet`` and, as JSON bodies, to the pymq topic ``--counts-topic``.

Each of the two queries reads the topic with its own source, so each reports its progress
under its own consumer group (``<--group>-parquet`` and ``<--group>-pymq``): one group per
query, as one Kafka group id per query — two queries sharing a group would overwrite each
other's offsets and the lag shown would be meaningless.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pymq.spark_connector import register


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", default="127.0.0.1:9876")
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--counts-topic", default="tag-counts")
    ap.add_argument("--out", default="/tmp/pymq-tag-counts")
    ap.add_argument("--group", default="spark-tag-counts", help="Prefix of the queries' consumer groups.")
    ap.add_argument("--seconds", type=float, default=0, help="Stop after this long (0: run until Ctrl-C).")
    args = ap.parse_args()

    spark = (
        SparkSession.builder.master("local[2]").appName("pymq-tag-counts")
        .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false").config("spark.log.structuredLogging.enabled", "false")
        .getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("WARN")
    # Installed normally, pymq registers "pymq" with Spark by itself; this covers editable installs.
    register(spark)

    def tag_counts(group: str) -> DataFrame:
        messages = (
            spark.readStream.format("pymq")
            .option("namesrv", args.namesrv)
            .option("topic", args.topic)
            .option("startingOffsets", "earliest")
            .option("consumerGroup", group)  # the broker then shows this query's lag
            .load()
        )
        return (
            messages.withWatermark("storeTimestamp", "2 minutes")
            .groupBy(F.window("storeTimestamp", "1 minute"), F.coalesce("tags", F.lit("(none)")).alias("tag"))
            .count()
            .select(F.col("window.start").alias("minute"), "tag", "count")
        )

    to_parquet = (
        tag_counts(f"{args.group}-parquet").writeStream.format("parquet").outputMode("append")
        .option("path", f"{args.out}/parquet").option("checkpointLocation", f"{args.out}/checkpoint-parquet")
        .start()
    )  # fmt: skip
    to_pymq = (
        tag_counts(f"{args.group}-pymq")
        .select(F.to_json(F.struct("minute", "tag", "count")).alias("body"), F.col("tag").alias("tags"))
        .writeStream.format("pymq").outputMode("append")
        .option("namesrv", args.namesrv).option("topic", args.counts_topic)
        .option("checkpointLocation", f"{args.out}/checkpoint-pymq")
        .start()
    )  # fmt: skip
    print(f"counting tags of {args.topic!r} per minute -> {args.out}/parquet and topic {args.counts_topic!r}")
    try:
        if args.seconds:
            to_parquet.awaitTermination(args.seconds)
        else:
            spark.streams.awaitAnyTermination()
    except KeyboardInterrupt:
        pass
    finally:
        to_parquet.stop()
        to_pymq.stop()
        spark.stop()


if __name__ == "__main__":
    main()
