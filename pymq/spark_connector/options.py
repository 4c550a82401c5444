"""Parsing and validating the connector's options (Spark hands them over as strings, keys lower-cased)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEMA_DDL = (
    "topic STRING, brokerName STRING, queueId INT, queueOffset BIGINT, msgId STRING, tags STRING, "
    "keys ARRAY<STRING>, body BINARY, properties MAP<STRING,STRING>, bornTimestamp TIMESTAMP, "
    "storeTimestamp TIMESTAMP, reconsumeTimes INT"
)
SCHEMA_FIELDS = [
    "topic", "brokerName", "queueId", "queueOffset", "msgId", "tags", "keys", "body", "properties",
    "bornTimestamp", "storeTimestamp", "reconsumeTimes",
]  # fmt: skip

_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}  # fmt: skip


class OptionError(ValueError):
    """An option is missing or has a bad value."""


def parse_duration(text: str) -> float:
    """'15m', '10 seconds', '500ms', '1h' -> seconds."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    factor = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or factor is None:
        raise OptionError(f"bad duration {text!r}: use e.g. 500ms, 30s, 15m or 1h")
    return float(m.group(1)) * factor


def _get(options: Mapping[str, str], name: str) -> str | None:
    lower = {k.lower(): v for k, v in options.items()}
    value = lower.get(name.lower())
    return None if value is None or str(value).strip() == "" else str(value)


def _int(options: Mapping[str, str], name: str, minimum: int = 1) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {raw!r}")
    return raw.lower() == "true"


def _offsets_spec(raw: str | None, name: str, default: str) -> str | dict[str, Any]:
    if raw is None:
        return default
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError:
        example = '{"orders": {"broker-a": {"0": 23}}}'
        raise OptionError(f"{name} must be earliest, latest or JSON like {example}") from None
    if not isinstance(spec, dict) or not all(isinstance(b, dict) for b in spec.values()):
        raise OptionError(f"{name} JSON must be {{topic: {{brokerName: {{queueId: offset}}}}}}")
    return spec


@dataclass(frozen=True)
class SourceOptions:
    namesrv: str
    topics: tuple[str, ...]
    starting: str | dict[str, Any]
    starting_timestamp: int | None
    ending: str | dict[str, Any]
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay: float
    fail_on_data_loss: bool
    consumer_group: str | None
    tags: str
    poll_timeout: float
    max_records_per_partition: int


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    namesrv = _get(options, "namesrv")
    if not namesrv:
        raise OptionError("option namesrv is required (e.g. 127.0.0.1:9876)")
    topic = _get(options, "topic")
    if not topic:
        raise OptionError("option topic is required (one topic or a comma-separated list)")
    topics = tuple(sorted({t.strip() for t in topic.split(",") if t.strip()}))
    starting = _offsets_spec(_get(options, "startingOffsets"), "startingOffsets", "latest" if streaming else "earliest")
    if not streaming and starting == "latest":
        raise OptionError("startingOffsets=latest is not allowed for batch reads")
    ending = _offsets_spec(_get(options, "endingOffsets"), "endingOffsets", "latest")
    if streaming and _get(options, "endingOffsets") is not None:
        raise OptionError("endingOffsets is only for batch reads")
    if ending == "earliest":
        raise OptionError("endingOffsets=earliest is not allowed")
    max_per = _int(options, "maxOffsetsPerTrigger")
    min_per = _int(options, "minOffsetsPerTrigger")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError("minOffsetsPerTrigger must not exceed maxOffsetsPerTrigger")
    delay = _get(options, "maxTriggerDelay")
    return SourceOptions(
        namesrv=namesrv,
        topics=topics,
        starting=starting,
        starting_timestamp=_int(options, "startingTimestamp", 0),
        ending=ending,
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay=parse_duration(delay) if delay else 15 * 60.0,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        consumer_group=_get(options, "consumerGroup"),
        tags=_get(options, "tags") or "*",
        poll_timeout=(_int(options, "pollTimeoutMs") or 120_000) / 1000,
        max_records_per_partition=_int(options, "maxRecordsPerPartition") or 500_000,
    )


@dataclass(frozen=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    batch_size: int
    producer_group: str


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    namesrv = _get(options, "namesrv")
    if not namesrv:
        raise OptionError("option namesrv is required (e.g. 127.0.0.1:9876)")
    return SinkOptions(
        namesrv=namesrv,
        topic=_get(options, "topic"),
        batch_size=_int(options, "batchSize") or 64,
        producer_group=_get(options, "producerGroup") or "PYMQ_SPARK_SINK",
    )
