"""Auto-registration hook: PySpark registers the ``DefaultSource`` of every installed ``pyspark_*`` module."""

from pymq.spark_connector.source import PymqDataSource as DefaultSource

__all__ = ["DefaultSource"]
