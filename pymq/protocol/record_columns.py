"""Concatenated records (a pull body) as columns, with no Python object per record.

:func:`record_columns` is :func:`~pymq.protocol.record.iter_records` turned sideways: each fixed
field of every record in one ``bytes`` of native integers, plus the spans of each record's body,
topic and properties, ready to wrap as Arrow buffers (the Spark connector does). The accelerator
scans the records once; :func:`record_columns_py` builds the same columns from
:func:`~pymq.protocol.record.iter_records_py` (the reference, and the path without the accelerator).

:func:`record_string_columns` adds the variable-size columns, written contiguously with Arrow's
int32 offsets (bodies, topics, the properties split into names and values, tags, message ids and
keys), so the connector wraps Arrow arrays around them without copying or splitting anything
itself; :func:`record_string_columns_py` is its reference.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from pymq.errors import MessageDecodeError
from pymq.protocol.record import RecordTuple, iter_records_py, offset_msg_id, speedups


class RecordColumns(NamedTuple):
    """The records' fields, column by column (native byte order; ``records`` of each)."""

    records: int
    #: int32 each
    sys_flags: bytes
    #: int64 each: born timestamps (ms)
    born: bytes
    #: int32 each
    reconsumes: bytes
    #: int32 each
    queue_ids: bytes
    #: int64 each
    queue_offsets: bytes
    #: int64 each: commitlog offsets
    physical: bytes
    #: int64 each: store timestamps (ms)
    stored: bytes
    #: 8 bytes each (4 of IPv4 address, 4 of port), as :func:`~pymq.protocol.record.offset_msg_id` takes them
    store_hosts: bytes
    #: int32, ``6 * records + 1``: per record, the buffer positions of its body, the 2-byte gap, its
    #: topic, the 2-byte gap, its properties and its end (so span ``6i`` of a binary array with these
    #: offsets is record i's body, ``6i + 2`` its topic, ``6i + 4`` its properties), then the last end
    bounds: bytes
    #: the error of the record that ended the scan early (the columns hold the records before it)
    error: MessageDecodeError | None


def record_columns(buf: bytes | bytearray | memoryview) -> RecordColumns:
    """The records of ``buf`` up to a blank marker, its end or a bad record, as columns.

    ``buf`` must be under 2 GiB (the bounds are int32, Arrow's binary offsets).
    """
    if speedups is not None:
        cols = speedups.record_columns(buf)
        if cols is not NotImplemented:
            return RecordColumns(*cols)
    return record_columns_py(buf)


def record_columns_py(buf: bytes | bytearray | memoryview) -> RecordColumns:
    """:func:`record_columns` in pure Python (the reference for the accelerator)."""
    rows: list[RecordTuple] = []
    error = None
    try:
        rows.extend(iter_records_py(buf))
    except MessageDecodeError as exc:
        error = exc
    if not rows:
        return RecordColumns(0, b"", b"", b"", b"", b"", b"", b"", b"", array("i", [0]).tobytes(), error)
    (_total, _crc, _flag, sys_flags, born, _bh, reconsumes, _prep, qids, qoffs, phys, stored,
     store_hosts, body_ats, topic_ats, props_ats, ends) = zip(*rows, strict=True)  # fmt: skip
    n = len(rows)
    bounds = array("i", [0]) * (6 * n + 1)
    bounds[0:-1:6] = array("i", body_ats)
    bounds[1:-1:6] = array("i", [t - 2 for t in topic_ats])
    bounds[2:-1:6] = array("i", topic_ats)
    bounds[3:-1:6] = array("i", [p - 2 for p in props_ats])
    bounds[4:-1:6] = array("i", props_ats)
    bounds[5::6] = array("i", ends)
    bounds[-1] = ends[-1]
    return RecordColumns(
        n,
        array("i", sys_flags).tobytes(),
        array("q", born).tobytes(),
        array("i", reconsumes).tobytes(),
        array("i", qids).tobytes(),
        array("q", qoffs).tobytes(),
        array("q", phys).tobytes(),
        array("q", stored).tobytes(),
        b"".join(store_hosts),
        bounds.tobytes(),
        error,
    )


class StringColumns(NamedTuple):
    """The records' variable-size columns, as the buffers of Arrow arrays (native int32 offsets).

    Each ``*_offsets`` indexes the ``bytes`` field after it. Strings are UTF-8 (checked). Per
    record: its body and topic; its properties, ``property_offsets`` giving each record's range of
    items in ``names``/``values`` (empty items skipped; an item without ``\\x01`` is a name with an
    empty value); its tag (its last ``TAGS`` value; ``tag_validity`` is Arrow's bitmap of records
    that have one); its message id (its last ``UNIQ_KEY`` value, or if none or empty its offset
    message id); its keys (``key_list_offsets`` into ``keys``: the space-separated words of every
    ``KEYS`` value, empty ones skipped).
    """

    body_offsets: bytes
    bodies: bytes
    topic_offsets: bytes
    topics: bytes
    property_offsets: bytes
    name_offsets: bytes
    names: bytes
    value_offsets: bytes
    values: bytes
    tag_validity: bytes
    tag_offsets: bytes
    tags: bytes
    id_offsets: bytes
    ids: bytes
    key_list_offsets: bytes
    key_offsets: bytes
    keys: bytes


#: the largest buffer :func:`record_string_columns` takes (its columns' int32 offsets must fit: ids add 32 bytes each)
MAX_STRING_COLUMNS_BUFFER = (1 << 30) - 1


def record_string_columns(buf: bytes | bytearray | memoryview) -> tuple[RecordColumns, StringColumns | None]:
    """:func:`record_columns` of ``buf`` and its records' string columns (``None`` if a topic or
    properties are not UTF-8: the caller decodes those another way).

    ``buf`` must be at most :data:`MAX_STRING_COLUMNS_BUFFER` bytes.
    """
    if speedups is not None:
        out = speedups.record_string_columns(buf)
        if out is not NotImplemented:
            cols, strings = out
            return RecordColumns(*cols), None if strings is None else StringColumns(*strings)
    return record_string_columns_py(buf)


def record_string_columns_py(buf: bytes | bytearray | memoryview) -> tuple[RecordColumns, StringColumns | None]:
    """:func:`record_string_columns` in pure Python (the reference for the accelerator)."""
    cols = record_columns_py(buf)
    return cols, string_columns_py(bytes(buf), cols)


class _StringColumn:
    """An Arrow string/binary column being built: its int32 offsets and its pieces."""

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, value: bytes) -> None:
        self.parts.append(value)
        self.size += len(value)
        self.offsets.append(self.size)

    def buffers(self) -> tuple[bytes, bytes]:
        return self.offsets.tobytes(), b"".join(self.parts)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _split_properties(
    props: bytes, names: _StringColumn, values: _StringColumn, keys: _StringColumn
) -> tuple[bytes | None, bytes | None]:
    """One record's properties into the name/value/key columns; its (tag, unique key), the last of each."""
    tag = uniq = None
    for item in props.split(b"\x02"):
        if not item:
            continue
        name, _, value = item.partition(b"\x01")
        names.add(name)
        values.add(value)
        if name == b"TAGS":
            tag = value
        elif name == b"UNIQ_KEY":
            uniq = value
        elif name == b"KEYS":
            for word in value.split(b" "):
                if word:
                    keys.add(word)
    return tag, uniq


def string_columns_py(data: bytes, cols: RecordColumns) -> StringColumns | None:
    """The string columns of ``cols``'s records (``cols`` is :func:`record_columns` of ``data``)."""
    bounds = array("i")
    bounds.frombytes(cols.bounds)
    phys = array("q")
    phys.frombytes(cols.physical)
    bodies, topics, names, values, tag_col, ids, keys = (_StringColumn() for _ in range(7))
    property_offsets, key_list_offsets = array("i", [0]), array("i", [0])
    validity = bytearray((cols.records + 7) // 8)
    for i in range(cols.records):
        body_at, body_end, topic_at, topic_end, props_at, end = bounds[6 * i : 6 * i + 6]
        topic, props = data[topic_at:topic_end], data[props_at:end]
        if not _is_utf8(topic) or not _is_utf8(props):
            return None
        bodies.add(data[body_at:body_end])
        topics.add(topic)
        tag, uniq = _split_properties(props, names, values, keys)
        property_offsets.append(len(names.parts))
        key_list_offsets.append(len(keys.parts))
        if tag is not None:
            validity[i // 8] |= 1 << (i % 8)
        tag_col.add(tag or b"")
        ids.add(uniq or offset_msg_id(cols.store_hosts[8 * i : 8 * i + 8], phys[i]).encode())
    return StringColumns(
        *bodies.buffers(),
        *topics.buffers(),
        property_offsets.tobytes(),
        *names.buffers(),
        *values.buffers(),
        bytes(validity),
        *tag_col.buffers(),
        *ids.buffers(),
        key_list_offsets.tobytes(),
        *keys.buffers(),
    )
