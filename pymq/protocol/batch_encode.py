"""A producer's batch of plain messages encoded into records in one pass (the hot path of ``send_batch``).

Plain: no keys, no user properties, no delay level, a ``bytes`` body that is not empty, not
above the size limit nor the compression threshold, and the batch's topic; tags are allowed.
Each record carries a ``UNIQ_KEY`` property made here: ``id_head`` (the unique id up to its
counter, :meth:`UniqueIdGenerator.id_head`) and ``next(counter) & 0xFFFF`` in four hex
digits, exactly as :meth:`UniqueIdGenerator.next_id` writes it. The bytes are those of
:func:`~pymq.protocol.record.encode_record` with the producer's properties, record after record.

For any other batch the answer is None and nothing was consumed: the producer's general
per-message code encodes it (and raises its errors). The C accelerator does the work where it
was built (``record.speedups.encode_batch``); :func:`encode_batch_py` is its reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pymq.protocol import record
from pymq.protocol.message import Message
from pymq.protocol.record import MAX_PROPERTIES_SIZE, encode_record, encoded_size

if record.speedups is not None:
    # The C code reads the fields of exact Message instances from their slots (no getattr per field).
    record.speedups.set_message_class(Message)

_UNIQ = b"UNIQ_KEY\x01"
_TAGS = b"TAGS\x01"
_INT32 = range(-(1 << 31), 1 << 31)
_INT64 = range(-(1 << 63), 1 << 63)


def encode_batch(
    messages: Sequence[Any],
    topic: str,
    topic_bytes: bytes,
    born_timestamp: int,
    born_host: bytes,
    max_size: int,
    compress_threshold: int,
    id_head: str,
    counter: Iterator[int],
) -> tuple[bytes, list[str]] | None:
    """``(records, unique ids)`` of a batch of plain messages (see the module docstring), else None.

    ``messages`` are :class:`~pymq.protocol.message.Message` objects (read by attribute);
    ``max_size`` bounds each body, each record and the whole batch.
    """
    speedups = record.speedups
    if speedups is not None:
        out = speedups.encode_batch(
            messages, topic, topic_bytes, born_timestamp, born_host, max_size, compress_threshold, id_head, counter
        )
        # NotImplemented: outside the plain case, which the Python body answers None for too (tested)
        return None if out is NotImplemented else out
    return encode_batch_py(
        messages, topic, topic_bytes, born_timestamp, born_host, max_size, compress_threshold, id_head, counter
    )


def _empty(value: object) -> bool:
    """None or an empty str, list or dict (exact types): the values a plain message may have."""
    return value is None or (type(value) in (str, list, dict) and not value)


def _tag_bytes(tags: object) -> bytes | None:
    """The TAGS value of a plain message, b"" for none, None if the message is not plain."""
    if tags is None or (type(tags) is str and not tags):
        return b""
    if type(tags) is not str:
        return None
    try:
        raw = tags.encode()
    except UnicodeEncodeError:
        return None
    return None if b"\x01" in raw or b"\x02" in raw else raw


def encode_batch_py(
    messages: Sequence[Any],
    topic: str,
    topic_bytes: bytes,
    born_timestamp: int,
    born_host: bytes,
    max_size: int,
    compress_threshold: int,
    id_head: str,
    counter: Iterator[int],
) -> tuple[bytes, list[str]] | None:
    """:func:`encode_batch` in pure Python (the reference for the accelerator)."""
    if (
        type(messages) is not list
        or not messages
        or type(topic) is not str
        or not topic
        or type(topic_bytes) is not bytes
        or len(topic_bytes) > 0xFFFF
        or type(born_timestamp) is not int
        or born_timestamp not in _INT64
        or type(born_host) is not bytes
        or len(born_host) != 8
        or type(max_size) is not int
        or max_size not in _INT64
        or type(compress_threshold) is not int
        or compress_threshold not in _INT64
        or type(id_head) is not str
        or not id_head.isascii()
        or len(id_head) + 4 > 1024
        or not hasattr(counter, "__next__")
    ):
        return None
    # pass 1: every message is checked before the counter is touched
    taken: list[tuple[bytes, bytes, int]] = []
    total = 0
    id_len = len(id_head) + 4
    try:
        for m in messages:
            if not (type(m.topic) is str and m.topic == topic):
                return None
            delay = m.delay_level
            if type(delay) is not int or delay > 0 or delay not in _INT64:
                return None
            if not _empty(m.keys) or not _empty(m.properties):
                return None
            flag = m.flag
            if type(flag) is not int or flag not in _INT32:
                return None
            tag = _tag_bytes(m.tags)
            body = m.body
            if (
                tag is None
                or type(body) is not bytes
                or not body
                or len(body) > max_size
                or len(body) > compress_threshold
            ):
                return None
            props_len = len(_UNIQ) + id_len + 1 + (len(_TAGS) + len(tag) + 1 if tag else 0)
            size = encoded_size(len(body), len(topic_bytes), props_len)
            total += size
            if props_len > MAX_PROPERTIES_SIZE or size > max_size or size > 0x7FFFFFFF or total > max_size:
                return None
            taken.append((body, tag, flag))
    except Exception:  # an attribute that cannot be read: the general code raises what it raises
        return None
    # pass 2: the records, each with its id
    records = []
    ids = []
    for body, tag, flag in taken:
        uniq = f"{id_head}{next(counter) & 0xFFFF:04X}"
        props = _UNIQ + uniq.encode() + b"\x02"
        if tag:
            props += _TAGS + tag + b"\x02"
        records.append(
            encode_record(topic_bytes, body, props, flag=flag, born_timestamp=born_timestamp, born_host=born_host)
        )
        ids.append(uniq)
    return b"".join(records), ids
