"""Spark structured-streaming source and sink for pymq topics (PySpark's Python data source API).

    from pymq.spark_connector import register
    register(spark)                     # or rely on auto-registration (see docs/SPARK.md)
    df = spark.readStream.format("pymq").option("namesrv", "127.0.0.1:9876").option("topic", "orders").load()

This is the only part of pymq that imports pyspark; nothing else imports it.
"""

from __future__ import annotations

from typing import Any

from pymq.spark_connector.offsets import offsets_behind_latest
from pymq.spark_connector.source import PymqDataSource


def register(spark: Any) -> None:
    """Make ``format("pymq")`` available in this Spark session."""
    spark.dataSource.register(PymqDataSource)


__all__ = ["PymqDataSource", "offsets_behind_latest", "register"]
