"""Parsing and validating the connector's options (Spark hands them over as strings, keys lower-cased)."""

from __future__ import annotations

import json
import logging
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


log = logging.getLogger("pymq.spark")


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
    return _queue_json(raw, name)


def _queue_json(raw: str, name: str) -> dict[str, Any]:
    """``{topic: {brokerName: {queueId: number}}}``, parsed and checked for shape."""
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError:
        example = '{"orders": {"broker-a": {"0": 23}}}'
        raise OptionError(f"{name} must be earliest, latest or JSON like {example}") from None
    ok = isinstance(spec, dict) and all(
        isinstance(b, dict) and all(isinstance(q, dict) for q in b.values()) for b in spec.values()
    )
    if not ok:
        raise OptionError(f"{name} JSON must be {{topic: {{brokerName: {{queueId: number}}}}}}")
    for topic, brokers in spec.items():
        for broker, queues in brokers.items():
            for qid, value in queues.items():
                if not str(qid).lstrip("-").isdigit() or isinstance(value, bool) or not isinstance(value, int):
                    raise OptionError(f"{name}: {topic}/{broker}/{qid}: queue ids and values must be integers")
    checked: dict[str, Any] = spec
    return checked


#: credentials and TLS (issue 20): Spark option (lower-cased) -> client keyword (pymq.client.security)
SECURITY_OPTIONS = {
    "accesskey": "access_key",
    "secretkey": "secret_key",
    "tls": "tls",
    "tlscafile": "tls_ca_file",
    "tlscertfile": "tls_cert_file",
    "tlskeyfile": "tls_key_file",
    "tlscheckhostname": "tls_check_hostname",
}
_SECURITY_NAMES = "accessKey, secretKey, tls, tlsCaFile, tlsCertFile, tlsKeyFile, tlsCheckHostname"
#: client keyword options, as a hashable tuple of pairs (partitions carry it to the executors)
ClientSecurity = tuple[tuple[str, Any], ...]


def parse_security(options: Mapping[str, str]) -> ClientSecurity:
    """The client keyword options for credentials and TLS (absent: the PYMQ_ACCESS_KEY/PYMQ_SECRET_KEY
    environment of each executor applies)."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        name = SECURITY_OPTIONS.get(key.lower())
        if name is None:
            continue
        if name in ("tls", "tls_check_hostname"):
            out[name] = _bool(options, key, name == "tls_check_hostname")
        else:
            out[name] = str(value)
    if ("access_key" in out) != ("secret_key" in out):
        raise OptionError("give both accessKey and secretKey")
    return tuple(sorted(out.items()))


#: every option the source understands (lower-cased: Spark hands option names over lower-cased)
SOURCE_OPTIONS = {
    "namesrv", "topic", "subscribe", "subscribepattern",
    "startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "failondataloss", "consumergroup", "groupidprefix", "tags", "polltimeoutms", "maxrecordsperpartition",
    *SECURITY_OPTIONS,
}  # fmt: skip
_SOURCE_NAMES = (
    "namesrv, topic (or subscribe), subscribePattern, startingOffsets, startingTimestamp, "
    "startingOffsetsByTimestamp, endingOffsets, endingTimestamp, endingOffsetsByTimestamp, maxOffsetsPerTrigger, "
    "minOffsetsPerTrigger, maxTriggerDelay, failOnDataLoss, consumerGroup, groupIdPrefix, tags, pollTimeoutMs, "
    "maxRecordsPerPartition, " + _SECURITY_NAMES
)
#: options with a pymq-specific reason to refuse them
_REFUSED = {
    "includeheaders": "includeHeaders is not needed: the 'properties' column (map<string,string>) always carries "
    "every message property, which is what Kafka calls headers",
    "assign": "assign is not supported: give startingOffsets JSON for the queues you want, or use topic",
    "kafka.bootstrap.servers": "this is the pymq source: use namesrv",
}
#: batch-only options (an error on a stream, as in Kafka)
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
#: stream-only options (ignored with a warning in batch reads, as in Kafka)
STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "consumerGroup", "groupIdPrefix")


def check_known(options: Mapping[str, str], known: set[str], names: str, what: str) -> None:
    """Reject options this side does not understand, naming them (a typo must not be silently ignored)."""
    for key in sorted(options):
        low = key.lower()
        if low == "includeheaders" and what == "source" and str(options[key]).strip().lower() == "false":
            continue  # asks for what the source does anyway
        if low in _REFUSED and what == "source":
            raise OptionError(f"option {key}: {_REFUSED[low]}")
        if low not in known:
            raise OptionError(f"unknown option {key!r} for the pymq {what}; its options are: {names}")


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
    pattern: str | None = None
    starting_by_timestamp: dict[str, Any] | None = None
    ending_timestamp: int | None = None
    ending_by_timestamp: dict[str, Any] | None = None
    group_id_prefix: str | None = None
    security: ClientSecurity = ()


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    check_known(options, SOURCE_OPTIONS, _SOURCE_NAMES, "source")
    namesrv = _get(options, "namesrv")
    if not namesrv:
        raise OptionError("option namesrv is required (e.g. 127.0.0.1:9876)")
    topic, subscribe, pattern = _get(options, "topic"), _get(options, "subscribe"), _get(options, "subscribePattern")
    if sum(x is not None for x in (topic, subscribe, pattern)) != 1:
        raise OptionError(
            "give exactly one of topic (one topic or a comma-separated list; subscribe is the same) "
            "and subscribePattern (a regular expression over topic names)"
        )
    topics = tuple(sorted({t.strip() for t in (topic or subscribe or "").split(",") if t.strip()}))
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"subscribePattern {pattern!r} is not a valid regular expression: {exc}") from None
    elif not topics:
        raise OptionError("option topic is required (one topic or a comma-separated list)")
    starting = _offsets_spec(_get(options, "startingOffsets"), "startingOffsets", "latest" if streaming else "earliest")
    if not streaming and starting == "latest":
        raise OptionError("startingOffsets=latest is not allowed for batch reads")
    if streaming:
        for name in _BATCH_ONLY:
            if _get(options, name) is not None:
                raise OptionError(f"{name} is only for batch reads")
    ending = _offsets_spec(_get(options, "endingOffsets"), "endingOffsets", "latest")
    if ending == "earliest":
        raise OptionError("endingOffsets=earliest is not allowed")
    by_ts = _get(options, "startingOffsetsByTimestamp")
    end_by_ts = _get(options, "endingOffsetsByTimestamp")
    max_per = _int(options, "maxOffsetsPerTrigger")
    min_per = _int(options, "minOffsetsPerTrigger")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError("minOffsetsPerTrigger must not exceed maxOffsetsPerTrigger")
    delay = _get(options, "maxTriggerDelay")
    ignored = [name for name in STREAM_ONLY if not streaming and _get(options, name) is not None]
    if ignored:
        log.warning("batch read: %s apply to streams only and are ignored", ", ".join(ignored))
    group, prefix = _get(options, "consumerGroup"), _get(options, "groupIdPrefix")
    if group is not None and prefix is not None:
        raise OptionError("give consumerGroup (a fixed group name) or groupIdPrefix (a generated one), not both")
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
        consumer_group=group,
        tags=_get(options, "tags") or "*",
        poll_timeout=(_int(options, "pollTimeoutMs") or 120_000) / 1000,
        max_records_per_partition=_int(options, "maxRecordsPerPartition") or 500_000,
        pattern=pattern,
        starting_by_timestamp=_queue_json(by_ts, "startingOffsetsByTimestamp") if by_ts else None,
        ending_timestamp=_int(options, "endingTimestamp", 0),
        ending_by_timestamp=_queue_json(end_by_ts, "endingOffsetsByTimestamp") if end_by_ts else None,
        group_id_prefix=prefix,
        security=parse_security(options),
    )


@dataclass(frozen=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    batch_size: int
    producer_group: str
    security: ClientSecurity = ()


#: sink options; checkpointLocation (and path) are Spark's own and reach the sink too
SINK_OPTIONS = {"namesrv", "topic", "batchsize", "producergroup", "checkpointlocation", *SECURITY_OPTIONS}
_SINK_NAMES = "namesrv, topic, batchSize, producerGroup, " + _SECURITY_NAMES


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    check_known(options, SINK_OPTIONS, _SINK_NAMES, "sink")
    namesrv = _get(options, "namesrv")
    if not namesrv:
        raise OptionError("option namesrv is required (e.g. 127.0.0.1:9876)")
    return SinkOptions(
        namesrv=namesrv,
        topic=_get(options, "topic"),
        batch_size=_int(options, "batchSize") or 64,
        producer_group=_get(options, "producerGroup") or "PYMQ_SPARK_SINK",
        security=parse_security(options),
    )
