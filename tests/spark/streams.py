"""Running a streaming query to its end in the Spark tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_available_now(df: Any, checkpoint: Path, *, out: Path | None = None) -> Any:
    """Run ``df`` with the availableNow trigger into parquet at ``out`` (the noop sink without one)
    and wait for it to finish; returns the stopped query (its ``recentProgress`` stays readable)."""
    writer = df.writeStream.option("checkpointLocation", str(checkpoint))
    writer = writer.format("parquet").option("path", str(out)) if out is not None else writer.format("noop")
    q = writer.trigger(availableNow=True).start()
    try:
        assert q.awaitTermination(180)
    finally:
        q.stop()
    return q
