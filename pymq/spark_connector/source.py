"""The ``pymq`` data source: batch and micro-batch reads of pymq topics.

The planning (offsets, limits, partitions) runs on the driver; each Spark partition is one
queue's offset range, and ``read()`` — on an executor, on a pickled copy of the reader —
opens its own connection from what the :class:`QueueRange` carries and yields Arrow batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pymq.client.queue_reader import QueueReader
from pymq.protocol.filter import parse_tags
from pymq.spark_connector.arrow import records_to_batch
from pymq.spark_connector.offsets import Table, backlog, from_json, rate_limit, to_json
from pymq.spark_connector.options import SCHEMA_DDL, SCHEMA_FIELDS, OptionError, SourceOptions, parse_source_options

log = logging.getLogger("pymq.spark")

#: rows per Arrow batch yielded by read()
ARROW_BATCH_ROWS = 4096


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One Spark partition: records ``[start, end)`` of one queue, and how to reach it."""

    namesrv: str
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    tags: str
    fail_on_data_loss: bool
    timeout: float


def read_partition(part: QueueRange) -> Iterator[Any]:
    """Executor side: pull the range and yield RecordBatches (filtered by tag)."""
    wanted = parse_tags(part.tags)
    with QueueReader(part.namesrv, timeout=part.timeout) as reader:
        pending: list[bytes] = []
        chunks = reader.read_range(
            (part.topic, part.broker, part.queue_id), part.start, part.end, tags=part.tags,
            fail_on_data_loss=part.fail_on_data_loss,
        )  # fmt: skip
        for body, _next in chunks:
            pending.append(bytes(body))
            if len(pending) >= 4:
                yield records_to_batch(pending, part.broker, wanted)
                pending = []
        if pending:
            yield records_to_batch(pending, part.broker, wanted)


def split_ranges(opts: SourceOptions, start: Table, end: Table) -> list[QueueRange]:
    parts = []
    step = opts.max_records_per_partition
    for key in sorted(end):
        lo, hi = start.get(key, 0), end[key]
        while lo < hi:
            nxt = min(hi, lo + step)
            topic, broker, qid = key
            parts.append(
                QueueRange(
                    opts.namesrv, topic, broker, qid, lo, nxt, opts.tags, opts.fail_on_data_loss, opts.poll_timeout
                )
            )
            lo = nxt
    return parts


def _check_schema(schema: StructType | None) -> None:
    if schema is not None and [f.name for f in schema.fields] != SCHEMA_FIELDS:
        raise OptionError("the pymq source has a fixed schema; do not pass .schema(...)")


class _Planner:
    """Driver-side access to the brokers: queues, their offsets, offsets by time."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._reader: QueueReader | None = None

    @property
    def reader(self) -> QueueReader:
        if self._reader is None:
            self._reader = QueueReader(self.opts.namesrv, timeout=self.opts.poll_timeout)
        return self._reader

    def min_max(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        return self.reader.min_max(self.reader.queues(list(self.opts.topics)))

    def resolve(
        self, spec: str | dict[str, Any], timestamp: int | None, bounds: dict[Any, tuple[int, int]], missing: int = -2
    ) -> Table:
        """Concrete offsets for earliest / latest / a timestamp / JSON (-2 earliest, -1 latest).

        Queues a JSON spec does not name get ``missing`` (-2: earliest, -1: latest).
        """
        if timestamp is not None:
            return self.reader.offsets_for_time(sorted(bounds), timestamp)
        if spec == "earliest":
            return {k: lo for k, (lo, _) in bounds.items()}
        if spec == "latest":
            return {k: hi for k, (_, hi) in bounds.items()}
        given = from_json(spec)  # type: ignore[arg-type]
        unknown = sorted(set(given) - set(bounds))
        if unknown:
            raise OptionError(f"offsets given for queues that do not exist: {unknown}")
        out = {}
        for k, (lo, hi) in bounds.items():
            off = given.get(k, missing)
            out[k] = lo if off == -2 else hi if off == -1 else off
        return out


class PymqBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[QueueRange]:
        planner = _Planner(self.opts)
        try:
            bounds = planner.min_max()
            start = planner.resolve(self.opts.starting, self.opts.starting_timestamp, bounds)
            end = planner.resolve(self.opts.ending, None, bounds, missing=-1)
        finally:
            if planner._reader is not None:
                planner._reader.close()
        return split_ranges(self.opts, start, {k: v for k, v in end.items() if v > start.get(k, 0)})

    def read(self, partition: QueueRange) -> Iterator[Any]:  # type: ignore[override]
        return read_partition(partition)


class PymqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner = _Planner(opts)
        self._initial: dict[str, Any] | None = None
        self._target: Table | None = None
        self._latest_seen: Table = {}
        self._committed: Table = {}
        # When the last trigger that minOffsetsPerTrigger did not hold back ran (Kafka's
        # lastTriggerMillis). None: none yet, so a query's first trigger is never held back.
        self._last_trigger: float | None = None
        self._available_now = False

    # --- offsets --------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        # Called more than once at query start: compute once so 'latest' stays put.
        if self._initial is None:
            bounds = self._planner.min_max()
            table = self._planner.resolve(self.opts.starting, self.opts.starting_timestamp, bounds)
            self._initial = to_json(table)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        self._target = {k: hi for k, (_, hi) in self._planner.min_max().items()}

    def _latest(self) -> Table:
        if self._target is not None:
            return dict(self._target)
        return {k: hi for k, (_, hi) in self._planner.min_max().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        self._commit_group(begin)  # everything before start has been processed and committed by Spark
        latest = self._latest()
        for k in latest:
            # A queue that appeared since the query started (topic expanded) is read from 0.
            begin.setdefault(k, 0)
        self._latest_seen = latest
        end = self._apply_limit(begin, latest, limit)
        return to_json(end)

    def _apply_limit(self, begin: Table, latest: Table, limit: ReadLimit) -> Table:
        if isinstance(limit, ReadAllAvailable):
            return latest
        cap = self.opts.max_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        # availableNow ends at the first trigger that returns ``start``, so holding a small
        # backlog back would end the query with rows unread: there only the cap applies.
        if isinstance(limit, ReadMinRows) and not self._available_now and self._hold(begin, latest, limit.min_rows):
            return begin
        return rate_limit(begin, latest, cap) if cap else latest

    def _hold(self, begin: Table, latest: Table, min_rows: int) -> bool:
        """Kafka's minOffsetsPerTrigger/maxTriggerDelay: hold back fewer than ``min_rows`` new messages
        until ``maxTriggerDelay`` after the last trigger that was not held back."""
        now = time.monotonic()
        last = self._last_trigger
        if (last is None or now - last >= self.opts.max_trigger_delay) or backlog(begin, latest) >= min_rows:
            self._last_trigger = now
            return False
        return True

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest_seen) if self._latest_seen else None

    # --- planning and reading -------------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[QueueRange]:
        begin, stop = from_json(start), from_json(end)
        if begin == stop:
            return []
        self._check_loss(begin, stop)
        return split_ranges(self.opts, begin, {k: v for k, v in stop.items() if v > begin.get(k, 0)})

    def _check_loss(self, begin: Table, stop: Table) -> None:
        """Offsets in range that cleanup deleted: fail clearly, or warn and skip (failOnDataLoss)."""
        bounds = self._planner.min_max()
        for k, lo_wanted in begin.items():
            if k in stop and stop[k] > lo_wanted and k in bounds and bounds[k][0] > lo_wanted:
                gone = f"{lo_wanted}..{bounds[k][0] - 1}"
                msg = f"{k}: offsets {gone} were deleted from the broker before Spark read them"
                if self.opts.fail_on_data_loss:
                    raise OptionError(msg + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipping them (failOnDataLoss=false)", msg)

    def read(self, partition: QueueRange) -> Iterator[Any]:  # type: ignore[override]
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(from_json(end))

    def _commit_group(self, table: Table) -> None:
        group = self.opts.consumer_group
        changed = {k: v for k, v in table.items() if self._committed.get(k) != v}
        if group and changed:
            try:
                self._planner.reader.commit(group, changed)
                self._committed.update(changed)
            except Exception as exc:  # lag reporting must never fail the query
                log.warning("could not commit offsets for group %s: %s", group, exc)

    def stop(self) -> None:
        if self._planner._reader is not None:
            self._planner._reader.close()


class PymqDataSource(DataSource):
    """``spark.read.format("pymq")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "pymq"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return PymqBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return PymqStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from pymq.spark_connector.sink import PymqBatchWriter

        return PymqBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from pymq.spark_connector.sink import PymqStreamWriter

        return PymqStreamWriter(dict(self.options), schema)
