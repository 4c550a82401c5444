"""The ``pymq`` data source: batch and micro-batch reads of pymq topics.

The planning (offsets, limits, partitions) runs on the driver; each Spark partition is one
queue's offset range, and ``read()`` — on an executor, on a pickled copy of the reader —
opens its own connection from what the :class:`QueueRange` carries and yields Arrow batches.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
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

from pymq.client.queue_reader import QueueKey, QueueReader
from pymq.protocol.filter import parse_tags
from pymq.protocol.requests import AUTO_CREATE_TOPIC
from pymq.spark_connector.arrow import records_to_batch
from pymq.spark_connector.offsets import Table, backlog, carry_forward, from_json, rate_limit, to_json
from pymq.spark_connector.options import (
    SCHEMA_DDL,
    SCHEMA_FIELDS,
    OptionError,
    SourceOptions,
    parse_source_options,
)

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
    #: credentials and TLS for the executor's reader
    security: tuple[tuple[str, Any], ...] = ()


def read_partition(part: QueueRange) -> Iterator[Any]:
    """Executor side: pull the range and yield RecordBatches (filtered by tag)."""
    wanted = parse_tags(part.tags)
    with QueueReader(part.namesrv, timeout=part.timeout, **dict(part.security)) as reader:
        pending: list[bytes | memoryview] = []
        chunks = reader.read_range(
            (part.topic, part.broker, part.queue_id), part.start, part.end, tags=part.tags,
            fail_on_data_loss=part.fail_on_data_loss,
        )  # fmt: skip
        for body, _next in chunks:
            pending.append(body)  # a view of the pull answer: records_to_batch copies once
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
                    opts.namesrv,
                    topic,
                    broker,
                    qid,
                    lo,
                    nxt,
                    opts.tags,
                    opts.fail_on_data_loss,
                    opts.poll_timeout,
                    opts.security,
                )
            )
            lo = nxt
    return parts


def _check_schema(schema: StructType | None) -> None:
    if schema is not None and [f.name for f in schema.fields] != SCHEMA_FIELDS:
        raise OptionError("the pymq source has a fixed schema; do not pass .schema(...)")


#: topics of the brokers' own machinery, never matched by subscribePattern (Kafka leaves out internal topics)
_SYSTEM_TOPICS = frozenset({AUTO_CREATE_TOPIC, "SCHEDULE_TOPIC_XXXX"})
_SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "RMQ_SYS_", "rmq_sys_")  # rmq_sys_REVIVE_LOG_<cluster>: pop state


def _is_system_topic(topic: str) -> bool:
    return topic in _SYSTEM_TOPICS or topic.startswith(_SYSTEM_PREFIXES)


def _name(key: QueueKey) -> str:
    return "/".join(map(str, key))


class DataLossError(RuntimeError):
    """Offsets the query still had to read are gone (failOnDataLoss=true)."""


class _Planner:
    """Driver-side access to the brokers: topics, queues, their offsets, offsets by time."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._reader: QueueReader | None = None

    @property
    def reader(self) -> QueueReader:
        if self._reader is None:
            self._reader = QueueReader(self.opts.namesrv, timeout=self.opts.poll_timeout, **dict(self.opts.security))
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def topics(self) -> list[str]:
        """The subscribed topics: the ``topic`` list, or those matching ``subscribePattern`` now."""
        if self.opts.pattern is None:
            return list(self.opts.topics)
        wanted = re.compile(self.opts.pattern)
        return [t for t in self.reader.topics() if wanted.fullmatch(t) and not _is_system_topic(t)]

    def min_max(self, *, tolerant: bool = False) -> dict[QueueKey, tuple[int, int]]:
        """``(min, max)`` offsets of the subscribed queues.

        ``tolerant``: queues whose broker cannot answer now (stopping, restarting, gone from
        the route) are left out instead of failing: a micro-batch carries their offsets over.
        """
        keys = self.reader.queues(self.topics(), missing_ok=tolerant or self.opts.pattern is not None)
        return self.reader.min_max(keys, skip_unavailable=tolerant)

    def start_offsets(self, bounds: dict[QueueKey, tuple[int, int]]) -> Table:
        """Where a new query (or a batch read) starts: startingTimestamp, else startingOffsetsByTimestamp,
        else startingOffsets (Kafka's order of precedence)."""
        o = self.opts
        if o.starting_timestamp is not None:
            return self.reader.offsets_for_time(sorted(bounds), o.starting_timestamp)
        if o.starting_by_timestamp is not None:
            return self._by_time(o.starting_by_timestamp, bounds, "startingOffsetsByTimestamp")
        if o.starting == "earliest":
            return {k: lo for k, (lo, _) in bounds.items()}
        if o.starting == "latest":
            return {k: hi for k, (_, hi) in bounds.items()}
        return self._from_json(o.starting, bounds, "startingOffsets")

    def end_offsets(self, bounds: dict[QueueKey, tuple[int, int]]) -> Table:
        """Where a batch read ends (exclusive): endingTimestamp, else endingOffsetsByTimestamp, else endingOffsets."""
        o = self.opts
        if o.ending_timestamp is not None:
            return self.reader.offsets_for_time(sorted(bounds), o.ending_timestamp)
        if o.ending_by_timestamp is not None:
            return self._by_time(o.ending_by_timestamp, bounds, "endingOffsetsByTimestamp")
        if o.ending == "latest":
            return {k: hi for k, (_, hi) in bounds.items()}
        return self._from_json(o.ending, bounds, "endingOffsets", ending=True)

    @staticmethod
    def _given(spec: dict[str, Any], bounds: dict[QueueKey, tuple[int, int]], name: str) -> Table:
        """The JSON's per-queue values; like Kafka, it must name every subscribed queue, and only those."""
        given = from_json(spec)
        unknown = sorted(set(given) - set(bounds))
        if unknown:
            raise OptionError(f"{name} names queues that are not subscribed or do not exist: {unknown}")
        missing = sorted(set(bounds) - set(given))
        if missing:
            raise OptionError(
                f"{name} must give every queue of the subscribed topics (use -2 for earliest, -1 for latest); "
                f"missing: {[_name(k) for k in missing]}"
            )
        return given

    def _from_json(
        self, spec: Any, bounds: dict[QueueKey, tuple[int, int]], name: str, *, ending: bool = False
    ) -> Table:
        out = {}
        for k, off in self._given(spec, bounds, name).items():
            lo, hi = bounds[k]
            if off == -1:
                out[k] = hi
            elif off == -2 and not ending:
                out[k] = lo
            elif off < 0:
                allowed = "-1 for latest" if ending else "-2 for earliest, -1 for latest"
                raise OptionError(f"{name}: {off} is not an offset for {_name(k)} (use {allowed})")
            elif off > hi:
                # Kafka fails too: silently reading nothing would hide a wrong offset
                raise OptionError(f"{name}: offset {off} of {_name(k)} is past the queue's end ({hi})")
            else:
                out[k] = off
        return out

    def _by_time(self, spec: dict[str, Any], bounds: dict[QueueKey, tuple[int, int]], name: str) -> Table:
        by_time: dict[int, list[QueueKey]] = {}
        for k, ts in self._given(spec, bounds, name).items():
            if ts < 0:
                raise OptionError(f"{name}: {ts} for {_name(k)} is not a timestamp (ms since the epoch)")
            by_time.setdefault(ts, []).append(k)
        out: Table = {}
        for ts, keys in by_time.items():
            out.update(self.reader.offsets_for_time(keys, ts))
        return out


def _read(partition: InputPartition) -> Iterator[Any]:
    # With no partitions to read PySpark still runs one task, on InputPartition(None): it reads nothing.
    if not isinstance(partition, QueueRange):
        return iter(())
    return read_partition(partition)


class PymqBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[QueueRange]:
        planner = _Planner(self.opts)
        try:
            bounds = planner.min_max()
            start = planner.start_offsets(bounds)
            end = planner.end_offsets(bounds)
        finally:
            planner.close()
        for k, hi in end.items():
            if hi < start[k]:
                raise OptionError(f"{_name(k)}: the ending offset {hi} is before the starting offset {start[k]}")
        return split_ranges(self.opts, start, {k: v for k, v in end.items() if v > start[k]})

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)


class PymqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner = _Planner(opts)
        self._initial: dict[str, Any] | None = None
        self._target: Table | None = None
        self._latest_seen: Table = {}
        self._committed: Table = {}
        self._group: str | None = opts.consumer_group
        self._went_back_warned: set[tuple[QueueKey, int, int]] = set()
        # When the last trigger that minOffsetsPerTrigger did not hold back ran (Kafka's
        # lastTriggerMillis). None: none yet, so a query's first trigger is never held back.
        self._last_trigger: float | None = None
        self._available_now = False

    # --- offsets --------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        # Called more than once at query start: compute once so 'latest' stays put. Strict:
        # a broker that cannot answer now fails the start rather than be read from 0 later.
        if self._initial is None:
            self._initial = to_json(self._planner.start_offsets(self._planner.min_max()))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        self._target = self._available()

    def _available(self) -> Table:
        """Max offsets of the queues that answer now (a stopping or restarting broker's are left out)."""
        if self._target is not None:
            return dict(self._target)
        return {k: hi for k, (_, hi) in self._planner.min_max(tolerant=True).items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        self._commit_group(begin)  # everything before start has been processed and committed by Spark
        # Queues missing now (broker stopped, restarting, left the route) keep their offsets in
        # the checkpoint, so they resume where they were when they return; no offset moves back.
        latest, went_back = carry_forward(begin, self._available())
        self._data_loss_went_back(went_back)
        for k in latest:
            # A queue first seen now (topic expanded, new topic matching the pattern) is read from 0.
            begin.setdefault(k, 0)
        self._latest_seen = latest
        end = self._apply_limit(begin, latest, limit)
        return to_json(end)

    def _data_loss_went_back(self, went_back: dict[QueueKey, tuple[int, int]]) -> None:
        """A broker whose max offset fell below where the query is lost data (store replaced or damaged)."""
        for k, (at, now) in sorted(went_back.items()):
            msg = (
                f"{_name(k)}: the broker's max offset went back from {at} to {now} (its store lost data or was "
                f"replaced)"
            )
            if self.opts.fail_on_data_loss:
                raise DataLossError(f"{msg}; set failOnDataLoss=false to skip ahead (read on from offset {at})")
            if (k, at, now) not in self._went_back_warned:
                self._went_back_warned.add((k, at, now))
                log.warning("%s; the query stays at offset %d (failOnDataLoss=false)", msg, at)

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
        # Shown as sources[].latestOffset in the query progress: offsets_behind_latest() reads it.
        return to_json(self._latest_seen) if self._latest_seen else None

    # --- planning and reading -------------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[QueueRange]:
        begin, stop = from_json(start), from_json(end)
        if begin == stop:
            return []
        ranges = {k: v for k, v in stop.items() if v > begin.get(k, 0)}
        self._check_loss(begin, ranges)
        return split_ranges(self.opts, begin, ranges)

    def _check_loss(self, begin: Table, ranges: Table) -> None:
        """Offsets in range that cleanup deleted: fail clearly, or warn and skip (failOnDataLoss)."""
        if not ranges:
            return
        bounds = self._planner.reader.min_max(sorted(ranges), skip_unavailable=True)
        for k, (lowest, _) in bounds.items():
            lo_wanted = begin.get(k, 0)
            if lowest > lo_wanted:
                gone = f"{lo_wanted}..{lowest - 1}"
                msg = f"{k}: offsets {gone} were deleted from the broker before Spark read them"
                if self.opts.fail_on_data_loss:
                    raise OptionError(msg + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipping them (failOnDataLoss=false)", msg)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(from_json(end))

    def group(self) -> str | None:
        """The consumer group lag is reported under: consumerGroup, or ``<groupIdPrefix>-<random>`` per run."""
        if self._group is None and self.opts.group_id_prefix is not None:
            self._group = f"{self.opts.group_id_prefix}-{uuid.uuid4().hex[:12]}"
            log.warning("pymq source: reporting this query's offsets under consumer group %s", self._group)
        return self._group

    def _commit_group(self, table: Table) -> None:
        changed = {k: v for k, v in table.items() if self._committed.get(k) != v}
        group = self.group() if changed else None
        if group and changed:
            try:
                masterless = set(self._planner.reader.commit(group, changed))
                # A queue whose master is away keeps its offset for the next commit.
                self._committed.update((k, v) for k, v in changed.items() if k not in masterless)
                if masterless:
                    log.info("offsets of %d queue(s) wait for their master: %s", len(masterless), sorted(masterless))
            except Exception as exc:  # lag reporting must never fail the query
                log.warning("could not commit offsets for group %s: %s", group, exc)

    def stop(self) -> None:
        self._planner.close()


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

        if overwrite:
            # Kafka's sink refuses it too: a topic cannot be truncated, so "overwrite" would append.
            raise OptionError('the pymq sink only appends: save mode "overwrite" is not supported, use .mode("append")')

        return PymqBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from pymq.spark_connector.sink import PymqStreamWriter

        return PymqStreamWriter(dict(self.options), schema)
