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
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pymq.errors import MessageDecodeError
from pymq.protocol.record import (
    NAME_VALUE_SEPARATOR,
    SYSFLAG_COMPRESSED,
    RecordTuple,
    decode_properties,
    find_property,
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


if TYPE_CHECKING:

    class _Field:
        """An int attribute of the record's fixed fields (what type checkers see)."""

        def __init__(self, index: int, doc: str) -> None: ...
        def __get__(self, obj: object, owner: type | None = None) -> int: ...
        def __set__(self, obj: object, value: int) -> None: ...

else:

    def _Field(index: int, doc: str) -> property:
        """A public attribute read from the record's fixed fields (assignable, as a plain attribute was)."""

        def get(self: MessageExt) -> Any:
            return self._f[index]

        def set_(self: MessageExt, value: Any) -> None:
            fields = list(self._f)
            fields[index] = value
            self._f = tuple(fields)

        return property(get, set_, doc=doc)


class MessageExt:
    """A received message: a record of a pull answer and where it was stored.

    Decoded lazily from the pull buffer: building one stores the record's fixed fields
    (one ``struct`` tuple) and a reference to the buffer; the body, topic, properties and
    host addresses are sliced and decoded on first access and then cached. A consumer that
    only looks at the body (or only at the tags) pays for nothing else. All attributes stay
    assignable. A message keeps its pull answer's buffer alive until it is dropped; pickling
    (or :meth:`detach`) copies just its own record.
    The topic (names are cached) and a compressed body are decoded at once: a record that
    cannot be decoded raises :class:`~pymq.errors.MessageDecodeError` when it is read.
    """

    __slots__ = ("_body", "_buf", "_f", "_properties", "_topic", "broker_name")

    _buf: bytes | bytearray | memoryview
    #: unpack_record's tuple: fixed fields and the slice bounds of body, topic and properties
    _f: RecordTuple
    _body: bytes | None
    _topic: str | None
    _properties: dict[str, str] | None
    broker_name: str

    store_size = _Field(0, "the record's size in the commitlog")
    body_crc = _Field(1, "crc32 of the stored (possibly compressed) body")
    flag = _Field(2, "the producer's flag")
    sys_flag = _Field(3, "SYSFLAG_* bits")
    born_timestamp = _Field(4, "ms since the epoch, set by the producer")
    reconsume_times = _Field(6, "how many times the message was consumed before")
    prepared_tx_offset = _Field(7, "the half message's commitlog offset (transactions)")
    queue_id = _Field(8, "the queue it was read from")
    queue_offset = _Field(9, "its entry number in the consume queue")
    commitlog_offset = _Field(10, "its commitlog offset")
    store_timestamp = _Field(11, "ms since the epoch, set by the broker")

    @property
    def body(self) -> bytes:
        body = self._body
        if body is None:
            f = self._f
            body = bytes(self._buf[f[13] : f[14] - 2])
            if f[3] & SYSFLAG_COMPRESSED:
                try:
                    body = zlib.decompress(body)
                except zlib.error as exc:
                    raise MessageDecodeError(f"cannot decompress body at {f[13] - 88}: {exc}") from exc
            self._body = body
        return body

    @body.setter
    def body(self, value: bytes) -> None:
        self._body = value

    @property
    def body_size(self) -> int:
        """``len(body)`` without copying the body out of the buffer (a compressed one is already decoded)."""
        body = self._body
        if body is not None:
            return len(body)
        f = self._f
        return f[14] - 2 - f[13]

    @property
    def topic(self) -> str:
        topic = self._topic
        if topic is None:
            f = self._f
            topic = self._topic = _topic_str(bytes(self._buf[f[14] : f[15] - 2]))
        return topic

    @topic.setter
    def topic(self, value: str) -> None:
        self._topic = value

    def _props_raw(self) -> bytes:
        f = self._f
        return bytes(self._buf[f[15] : f[16]])

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self._props_raw())
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    def get_property(self, key: str) -> str | None:
        """One property, without decoding the others (until :attr:`properties` is touched)."""
        props = self._properties
        if props is not None:
            return props.get(key)
        f = self._f
        raw = find_property(bytes(self._buf[f[15] : f[16]]), key.encode() + NAME_VALUE_SEPARATOR)
        return None if raw is None else raw.decode(errors="replace")

    @property
    def born_host(self) -> str:
        return unpack_host(self._f[5])

    @property
    def store_host(self) -> str:
        return unpack_host(self._f[12])

    @property
    def tags(self) -> str | None:
        props = self._properties
        if props is not None:
            return props.get(Prop.TAGS)
        f = self._f  # inlined get_property: client-side tag filtering asks every message
        raw = find_property(bytes(self._buf[f[15] : f[16]]), _TAGS_KEY)
        return None if raw is None else raw.decode(errors="replace")

    @property
    def keys(self) -> list[str]:
        raw = self.get_property(Prop.KEYS)
        return [k for k in raw.split(" ") if k] if raw else []

    @property
    def msg_id(self) -> str:
        """The producer-assigned unique id (UNIQ_KEY), or the offset id if the producer set none."""
        return self.get_property(Prop.UNIQ_KEY) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        f = self._f
        return offset_msg_id(f[12], f[10])

    @property
    def delay_level(self) -> int:
        return int(self.get_property(Prop.DELAY) or 0)

    def detach(self) -> MessageExt:
        """Copy this message's record out of the pull buffer (so a long-kept message does not keep
        the whole answer alive). Returns self."""
        f = self._f
        start = f[16] - f[0]
        if start or len(self._buf) != f[0] or not isinstance(self._buf, bytes):
            self._buf = bytes(self._buf[start : f[16]])
            self._f = (*f[:13], f[13] - start, f[14] - start, f[15] - start, f[16] - start)
        return self

    def __getstate__(self) -> tuple[Any, ...]:
        self.detach()
        return (self._buf, self._f, self._body, self._topic, self._properties, self.broker_name)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self._buf, self._f, self._body, self._topic, self._properties, self.broker_name = state

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


_TAGS_KEY = Prop.TAGS.encode() + NAME_VALUE_SEPARATOR


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
    """The record at ``pos`` as a :class:`MessageExt` (fields decoded on first access).

    With ``decompress`` off a compressed body is returned as stored.
    """
    m = _message(unpack_record(buf, pos), buf, broker_name)
    if not decompress:
        f = m._f
        m._body = bytes(buf[f[13] : f[14] - 2])
    return m


def _message(fields: RecordTuple, buf: bytes | bytearray | memoryview, broker_name: str) -> MessageExt:
    m = _new_message(MessageExt)
    m._buf = buf
    m._f = fields
    m._properties = None
    m.broker_name = broker_name
    # The topic (cached per name) and a compressed body are decoded now, so a record that
    # cannot be decoded fails here, in the pull, and not later in a listener.
    m._topic = _topic_str(bytes(buf[fields[14] : fields[15] - 2]))
    m._body = None
    if fields[3] & SYSFLAG_COMPRESSED:
        m._body = m.body
    return m


_new_message = MessageExt.__new__


_M = TypeVar("_M", bound=MessageExt)


@overload
def iter_messages(
    buf: bytes | bytearray | memoryview, *, broker_name: str = "", decompress: bool = True
) -> Iterator[MessageExt]: ...


@overload
def iter_messages(
    buf: bytes | bytearray | memoryview, *, broker_name: str = "", decompress: bool = True, message_class: type[_M]
) -> Iterator[_M]: ...


def iter_messages(
    buf: bytes | bytearray | memoryview,
    *,
    broker_name: str = "",
    decompress: bool = True,
    message_class: type[MessageExt] = MessageExt,
) -> Iterator[MessageExt]:
    """Messages of concatenated records (a pull response body), stopping at a blank marker.

    Each holds a reference to ``buf``, which must not change afterwards (pull answers never do).
    ``message_class`` (a subclass of :class:`MessageExt` whose own slots the caller fills) is made
    directly, without a copy per message.
    """
    if not decompress:
        for m in iter_messages(buf, broker_name=broker_name, message_class=message_class):
            f = m._f
            m._body = bytes(buf[f[13] : f[14] - 2])
            yield m
        return
    # _message inlined (this loop is the consumer's per-record cost); the records of one pull
    # answer share their topic, so its name is looked up once per run of equal topics.
    new = _new_message
    last_raw = b""
    topic = ""
    for f in iter_records(buf):
        m = new(message_class)
        m._buf = buf
        m._f = f
        m._properties = m._body = None
        m.broker_name = broker_name
        raw = bytes(buf[f[14] : f[15] - 2])
        if raw != last_raw or not topic:
            topic = _topic_str(raw)
            last_raw = raw
        m._topic = topic
        if f[3] & SYSFLAG_COMPRESSED:
            m._body = m.body
        yield m


#: two upper-case hex digits per byte value (the counter of unique ids, formatted per send)
_HEX2 = tuple(f"{i:02X}" for i in range(256))


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
        #: (ms, the id up to the counter) of the last call: ids of one millisecond share it
        #: (one tuple, swapped whole, so concurrent callers never mix two milliseconds)
        self._head: tuple[int, str] = (-1, "")

    def _roll_month(self, now_ms: int) -> None:
        t = time.gmtime(now_ms / 1000)
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._month_start_ms = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, 0)) * 1000
        self._next_month_ms = calendar.timegm((year, month, 1, 0, 0, 0, 0, 0, 0)) * 1000

    @property
    def counter(self) -> Iterator[int]:
        """The counter of the ids' last four hex digits (``next(counter) & 0xFFFF``), shared by all ids."""
        return self._counter

    def id_head(self, now_ms: int | None = None) -> str:
        """The id up to its counter, for now: ``id_head() + f"{next(counter) & 0xFFFF:04X}"`` is an id.

        (What a batch encoder uses to make many ids with one clock read.) ``now_ms``: the wall
        clock in ms if the caller read it already (e.g. for the born timestamp).
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if now >= self._next_month_ms:
            with self._lock:
                self._roll_month(now)
        head = self._head
        if head[0] != now:
            head = self._head = (now, f"{self._prefix}{(now - self._month_start_ms) & 0xFFFFFFFF:08X}")
        return head[1]

    def next_id(self, now_ms: int | None = None) -> str:
        """A new id; ``now_ms`` (the wall clock in ms, e.g. the message's born timestamp) saves a clock read."""
        # id_head() inlined: a single send's id is on the hot path
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if now >= self._next_month_ms:
            with self._lock:
                self._roll_month(now)
        c = next(self._counter) & 0xFFFF
        head = self._head
        if head[0] != now:  # the prefix and elapsed time are formatted once per millisecond
            head = self._head = (now, f"{self._prefix}{(now - self._month_start_ms) & 0xFFFFFFFF:08X}")
        return head[1] + _HEX2[c >> 8] + _HEX2[c & 0xFF]  # f"{c:04X}" from a table: half the time
