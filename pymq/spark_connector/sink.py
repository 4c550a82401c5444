"""The ``pymq`` sink: ``df.write.format("pymq")`` and ``writeStream.format("pymq")``.

Columns: ``body`` (binary or string, required), ``topic`` (unless the ``topic`` option is
set, which wins), and optionally ``keys`` (array<string> or a space-separated string),
``tags``, ``properties`` (map<string,string>) and ``shardingKey`` (rows with the same key go
to the same queue, in order). Rows are sent in batches; a failed send fails the task and
Spark retries it, so delivery is at least once (see docs/SPARK.md).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pymq.client import Message, MessageQueue, Producer, SelectByHash
from pymq.spark_connector.options import OptionError, SinkOptions, parse_sink_options
from pymq.transport.loop import run

#: rows taken from the iterator at a time (order is kept across chunks)
CHUNK_ROWS = 4096
MAX_BATCH_BYTES = 1024 * 1024


@dataclass
class SentMessages(WriterCommitMessage):
    sent: int


def _check_columns(schema: StructType, opts: SinkOptions) -> None:
    names = set(schema.fieldNames())
    if "body" not in names:
        raise OptionError("the pymq sink needs a 'body' column (binary or string)")
    if "topic" not in names and not opts.topic:
        raise OptionError("give the pymq sink a 'topic' column or a topic option")


def _message(row: Any, names: set[str], topic_option: str | None) -> tuple[Message, str | None]:
    body = row["body"]
    if body is None:
        raise ValueError("a row has a null body")
    if isinstance(body, str):
        body = body.encode()
    topic = topic_option or row["topic"]
    if not topic:
        raise ValueError("a row has no topic")
    keys = row["keys"] if "keys" in names else None
    props = row["properties"] if "properties" in names else None
    sharding = row["shardingKey"] if "shardingKey" in names else None
    msg = Message(
        topic,
        bytes(body),
        tags=row["tags"] if "tags" in names else None,
        keys=list(keys) if isinstance(keys, (list, tuple)) else keys,
        properties={str(k): str(v) for k, v in (props or {}).items()},
    )
    return msg, None if sharding is None else str(sharding)


async def _send_group(producer: Producer, msgs: list[Message], queue: MessageQueue | None, batch: int) -> int:
    """Send one group's messages in order, as batches (one request each)."""
    sent = 0
    i = 0
    while i < len(msgs):
        chunk: list[Message] = []
        size = 0
        while i < len(msgs) and len(chunk) < batch and (not chunk or size + len(msgs[i].body) < MAX_BATCH_BYTES):
            chunk.append(msgs[i])
            size += len(msgs[i].body) + 200
            i += 1
        await producer.send_batch(chunk, queue=queue)
        sent += len(chunk)
    return sent


async def _write_rows(opts: SinkOptions, names: set[str], rows: Iterator[Any]) -> int:
    selector = SelectByHash()
    sent = 0
    name = f"spark-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    async with Producer(opts.namesrv, opts.producer_group, instance_name=name, **dict(opts.security)) as producer:
        while True:
            chunk = [r for _, r in zip(range(CHUNK_ROWS), rows, strict=False)]
            if not chunk:
                break
            # Rows of one (topic, queue) stay in order; different groups are sent concurrently.
            groups: dict[tuple[str, MessageQueue | None], list[Message]] = defaultdict(list)
            for row in chunk:
                msg, key = _message(row, names, opts.topic)
                queue = None
                if key is not None:
                    queue = selector(await producer.queues_for(msg.topic), msg, key)
                groups[(msg.topic, queue)].append(msg)
            counts = await asyncio.gather(
                *(_send_group(producer, msgs, queue, opts.batch_size) for (_, queue), msgs in groups.items())
            )
            sent += sum(counts)
    return sent


class _Writer:
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        _check_columns(schema, self.opts)
        self.names = set(schema.fieldNames())

    def write(self, iterator: Iterator[Any]) -> SentMessages:
        return SentMessages(run(_write_rows(self.opts, self.names, iterator)))


class PymqBatchWriter(_Writer, DataSourceWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Messages already sent stay sent: the sink is at-least-once, not transactional.
        return None


class PymqStreamWriter(_Writer, DataSourceStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None
