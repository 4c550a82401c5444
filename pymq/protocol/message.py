"""User-facing message types and the well-known property keys.

:class:`Message` is what a producer sends; :class:`MessageExt` is what a consumer
receives (a decoded record plus where it came from).
"""

from __future__ import annotations

import calendar
import itertools
import os
import random
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pymq.errors import MessageDecodeError
from pymq.protocol.record import (
    SYSFLAG_COMPRESSED,
    RecordTuple,
    decode_properties,
    iter_records,
    offset_msg_id,
    unpack_host,
    unpack_record,
)


class Prop:
    """Well-known property keys (RocketMQ's names)."""

    TAGS = "TAGS"
    KEYS = "KEYS"
    UNIQ_KEY = "UNIQ_KEY"
    DELAY = "DELAY"
    WAIT = "WAIT"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    RECONSUME_TIME = "RECONSUME_TIME"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    SHARDING_KEY = "SHARDING_KEY"
    DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
    DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
    # --- timer and merged-delay messages (issue 17) ---
    #: absolute delivery time, ms since the epoch (RocketMQ 5)
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    #: delivery after this many ms / s from the broker's receipt (RocketMQ 5)
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    #: the delivery time the broker computed (set by the broker, RocketMQ's name)
    TIMER_OUT_MS = "TIMER_OUT_MS"
    #: merged delay (pymq): messages of one topic with this key within the window are delivered once
    MERGE_KEY = "MERGE_KEY"
    MERGE_WINDOW_MS = "MERGE_WINDOW_MS"
    #: on a delivered merged message: how many messages were merged into it (set by the broker)
    MERGE_COUNT = "MERGE_COUNT"
    #: priority topics (pymq): 0 (default) .. levels-1, higher is consumed first
    PRIORITY = "PRIORITY"


#: Properties the SDK manages itself; user code sets them through Message attributes.
RESERVED_PROPERTIES = frozenset({Prop.TAGS, Prop.KEYS, Prop.UNIQ_KEY, Prop.DELAY})


@dataclass(slots=True)
class Message:
    """A message to send. ``keys`` are business keys (indexed on the broker for lookup)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0

    def set_delivery_time(self, deliver_at_ms: int) -> Message:
        """Deliver at this wall-clock time (ms since the epoch); a past time means now. Returns self."""
        self.properties[Prop.TIMER_DELIVER_MS] = str(int(deliver_at_ms))
        return self

    def set_delay_ms(self, delay_ms: int) -> Message:
        """Deliver ``delay_ms`` after the broker receives it (any delay up to the broker's maximum)."""
        self.properties[Prop.TIMER_DELAY_MS] = str(int(delay_ms))
        return self

    def set_merge(self, key: str, window_ms: int) -> Message:
        """Merged delay: delivered once at (first send + ``window_ms``); later sends of this topic and
        ``key`` before then merge into it (the broker's ``timer_merge_keep`` says whose body wins)."""
        self.properties[Prop.MERGE_KEY] = key
        self.properties[Prop.MERGE_WINDOW_MS] = str(int(window_ms))
        return self

    def set_priority(self, priority: int) -> Message:
        """On a priority topic: consumed before lower priorities (0 .. the topic's levels - 1)."""
        self.properties[Prop.PRIORITY] = str(int(priority))
        return self

    def key_list(self) -> list[str]:
        if not self.keys:
            return []
        if isinstance(self.keys, str):
            return [k for k in self.keys.split(" ") if k]
        return [k for k in self.keys if k]

    def all_properties(self) -> dict[str, str]:
        """User properties plus the ones derived from tags, keys and delay level."""
        props: dict[str, str] = {}
        if self.tags:
            props[Prop.TAGS] = self.tags
        keys = self.key_list()
        if keys:
            props[Prop.KEYS] = " ".join(keys)
        if self.delay_level > 0:
            props[Prop.DELAY] = str(self.delay_level)
        for k, v in self.properties.items():
            props.setdefault(k, v)
        return props


class MessageExt:
    """A received message: the decoded record and where it was stored.

    Properties and host addresses are decoded on first access: a consumer that only looks
    at the body does not pay for them.
    """

    __slots__ = (
        "_born_host",
        "_properties",
        "_props_raw",
        "_store_host",
        "body",
        "body_crc",
        "born_timestamp",
        "broker_name",
        "commitlog_offset",
        "flag",
        "prepared_tx_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_size",
        "store_timestamp",
        "sys_flag",
        "topic",
    )

    topic: str
    body: bytes
    flag: int
    sys_flag: int
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    prepared_tx_offset: int
    store_size: int
    body_crc: int
    broker_name: str
    _props_raw: bytes
    _properties: dict[str, str] | None
    _born_host: bytes
    _store_host: bytes

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self._props_raw)
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    @property
    def born_host(self) -> str:
        return unpack_host(self._born_host)

    @property
    def store_host(self) -> str:
        return unpack_host(self._store_host)

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(Prop.KEYS)
        return [k for k in raw.split(" ") if k] if raw else []

    @property
    def msg_id(self) -> str:
        """The producer-assigned unique id (UNIQ_KEY), or the offset id if the producer set none."""
        return self.properties.get(Prop.UNIQ_KEY) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self._store_host, self.commitlog_offset)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(Prop.DELAY, "0") or 0)

    def __repr__(self) -> str:
        return (
            f"<MessageExt topic={self.topic!r} queue={self.broker_name}:{self.queue_id} "
            f"offset={self.queue_offset} msg_id={self.msg_id} tags={self.tags!r} "
            f"reconsume_times={self.reconsume_times} body={len(self.body)}B>"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "brokerName": self.broker_name,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.commitlog_offset,
            "msgId": self.msg_id,
            "offsetMsgId": self.offset_msg_id,
            "tags": self.tags,
            "keys": self.keys,
            "properties": dict(self.properties),
            "bornTimestamp": self.born_timestamp,
            "bornHost": self.born_host,
            "storeTimestamp": self.store_timestamp,
            "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times,
            "storeSize": self.store_size,
            "sysFlag": self.sys_flag,
            "flag": self.flag,
        }


_TOPICS: dict[bytes, str] = {}


def _topic_str(raw: bytes) -> str:
    topic = _TOPICS.get(raw)
    if topic is None:
        try:
            topic = raw.decode()
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"topic is not UTF-8: {exc}") from exc
        if len(_TOPICS) < 10_000:
            _TOPICS[raw] = topic
    return topic


def decode_message(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, broker_name: str = "", decompress: bool = True
) -> MessageExt:
    """Decode the record at ``pos`` into a :class:`MessageExt` (copies the body)."""
    return _message(unpack_record(buf, pos), buf, pos, broker_name, decompress)


def _message(
    fields: RecordTuple, buf: bytes | bytearray | memoryview, pos: int, broker_name: str, decompress: bool
) -> MessageExt:
    (
        total, crc, flag, sys_flag, born_ts, born_host, reconsume, prepared,
        queue_id, queue_offset, physical, store_ts, store_host, body_at, topic_at, props_at, end,
    ) = fields  # fmt: skip
    body = bytes(buf[body_at : topic_at - 2])
    if decompress and sys_flag & SYSFLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise MessageDecodeError(f"cannot decompress body at {pos}: {exc}") from exc
    m = MessageExt.__new__(MessageExt)
    m.topic = _topic_str(bytes(buf[topic_at : props_at - 2]))
    m.body = body
    m._props_raw = bytes(buf[props_at:end])
    m._properties = None
    m.flag = flag
    m.sys_flag = sys_flag
    m.queue_id = queue_id
    m.queue_offset = queue_offset
    m.commitlog_offset = physical
    m.born_timestamp = born_ts
    m._born_host = born_host
    m.store_timestamp = store_ts
    m._store_host = store_host
    m.reconsume_times = reconsume
    m.prepared_tx_offset = prepared
    m.store_size = total
    m.body_crc = crc
    m.broker_name = broker_name
    return m


def iter_messages(
    buf: bytes | bytearray | memoryview, *, broker_name: str = "", decompress: bool = True
) -> Iterator[MessageExt]:
    """Decode concatenated records (a pull response body), stopping at a blank marker."""
    for fields in iter_records(buf):
        yield _message(fields, buf, fields[16] - fields[0], broker_name, decompress)


class UniqueIdGenerator:
    """Producer-side unique message ids (UNIQ_KEY): 32 uppercase hex characters.

    ip (4) + pid (2) + random (4) + ms since the start of this month (4) + counter (2),
    like RocketMQ's ``MessageClientIDSetter``. Unique per process without coordination.
    """

    def __init__(self, ip: str | None = None) -> None:
        """``ip``: the producer's address (the client passes its own; loopback otherwise)."""
        try:
            ip_bytes = socket.inet_aton(ip or "127.0.0.1")
        except OSError:
            ip_bytes = b"\x7f\x00\x00\x01"
        self._prefix = (ip_bytes + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start_ms = 0
        self._next_month_ms = 0

    def _roll_month(self, now_ms: int) -> None:
        t = time.gmtime(now_ms / 1000)
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._month_start_ms = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, 0)) * 1000
        self._next_month_ms = calendar.timegm((year, month, 1, 0, 0, 0, 0, 0, 0)) * 1000

    def next_id(self) -> str:
        now = int(time.time() * 1000)
        if now >= self._next_month_ms:
            with self._lock:
                self._roll_month(now)
        elapsed = (now - self._month_start_ms) & 0xFFFFFFFF
        c = next(self._counter) & 0xFFFF
        return f"{self._prefix}{elapsed:08X}{c:04X}"
