"""Stored records straight to Arrow columns, without a Python message object per record.

:func:`records_to_batch` is columnar: one scan
(:func:`~pymq.protocol.record_columns.record_string_columns`, in C) gives each record's fixed
fields and writes the bodies, topics, properties (split into names and values), tags, message ids
and keys contiguously with Arrow's int32 offsets; the arrays are then wrapped around those
buffers without a copy. Python touches no record. A chunk whose topics or properties are not
UTF-8 goes through the row-by-row decoder (:func:`records_to_batch_by_rows`, which replaces bad
bytes), which is also the reference the columnar one is tested against.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pymq.errors import MessageDecodeError
from pymq.protocol.record import SYSFLAG_COMPRESSED, iter_records, offset_msg_id
from pymq.protocol.record_columns import (
    MAX_STRING_COLUMNS_BUFFER,
    RecordColumns,
    StringColumns,
    record_string_columns,
)

ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("brokerName", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("msgId", pa.string()),
        ("tags", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("body", pa.binary()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("bornTimestamp", pa.timestamp("us", tz="UTC")),
        ("storeTimestamp", pa.timestamp("us", tz="UTC")),
        ("reconsumeTimes", pa.int32()),
    ]
)


def records_to_batch(
    chunks: Iterable[bytes | memoryview], broker: str, tags: frozenset[str] | None = None
) -> pa.RecordBatch:
    """Decode concatenated records (pull response bodies) into one RecordBatch of the source schema.

    ``tags``: keep only records whose tag is in the set (the broker filtered by hash already).
    """
    parts = [b for b in chunks if len(b)]
    if not parts:
        return _empty_batch()
    buf = parts[0] if len(parts) == 1 else b"".join(parts)
    if len(buf) >= _MAX_SPAN_BYTES:  # Arrow's binary offsets are 32-bit (and ids add bytes)
        return records_to_batch_by_rows([bytes(buf)], broker, tags)
    cols, strings = record_string_columns(buf)
    if cols.error is not None:
        raise ValueError(f"not a pymq record: {cols.error}") from cols.error
    if not cols.records:
        return _empty_batch()
    if strings is None:  # not UTF-8 where a string is expected: decode with replacement
        return records_to_batch_by_rows([bytes(buf)], broker, tags)
    return _columnar(cols, strings, broker, tags)


_MAX_SPAN_BYTES = MAX_STRING_COLUMNS_BUFFER + 1
# Arrow scalars, not Python values: converting a Python value tries to import optional modules on every call.
_ZERO = pa.scalar(0, pa.int32())
_COMPRESSED = pa.scalar(SYSFLAG_COMPRESSED, pa.int32())


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


def _columnar(cols: RecordColumns, strings: StringColumns, broker: str, tags: frozenset[str] | None) -> pa.RecordBatch:
    """The batch of the records ``cols``/``strings`` (:func:`record_string_columns`): Arrow arrays
    around their buffers."""
    n = cols.records
    bodies = _strings(pa.binary(), strings.body_offsets, strings.bodies)
    flags = _column(pa.int32(), n, cols.sys_flags)
    if pc.any(pc.not_equal(pc.bit_wise_and(flags, _COMPRESSED), _ZERO)).as_py():
        raw = bodies.to_pylist()
        bodies = pa.array(
            [zlib.decompress(b) if f & SYSFLAG_COMPRESSED else b for b, f in zip(raw, flags.to_pylist(), strict=True)],
            pa.binary(),
        )
    tag_col = _strings(pa.string(), strings.tag_offsets, strings.tags, strings.tag_validity)
    names = _strings(pa.string(), strings.name_offsets, strings.names)
    values = _strings(pa.string(), strings.value_offsets, strings.values)
    keys = _strings(pa.string(), strings.key_offsets, strings.keys)
    batch = pa.RecordBatch.from_arrays(
        [
            _strings(pa.string(), strings.topic_offsets, strings.topics),
            pc.fill_null(pa.nulls(n, pa.string()), pa.scalar(broker, pa.string())),
            _column(pa.int32(), n, cols.queue_ids),
            _column(pa.int64(), n, cols.queue_offsets),
            _strings(pa.string(), strings.id_offsets, strings.ids),
            tag_col,
            pa.Array.from_buffers(_KEYS, n, [None, pa.py_buffer(strings.key_list_offsets)], children=[keys]),
            bodies,
            pa.MapArray.from_arrays(_column(pa.int32(), n + 1, strings.property_offsets), names, values),
            _ms_to_timestamps(_column(pa.int64(), n, cols.born)),
            _ms_to_timestamps(_column(pa.int64(), n, cols.stored)),
            _column(pa.int32(), n, cols.reconsumes),
        ],
        schema=ARROW_SCHEMA,
    )
    if tags is not None:
        batch = batch.filter(pc.is_in(tag_col, value_set=pa.array(sorted(tags), pa.string())))
    return batch


_KEYS = ARROW_SCHEMA.field("keys").type


def _strings(kind: pa.DataType, offsets: bytes, data: bytes, validity: bytes | None = None) -> pa.Array:
    """A string/binary array around ``offsets`` (native int32) and ``data`` (no copy)."""
    return pa.Array.from_buffers(
        kind,
        len(offsets) // 4 - 1,
        [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)],
    )


def _column(kind: pa.DataType, n: int, data: bytes) -> pa.Array:
    """``n`` native integers of ``data`` as an Arrow array (no copy)."""
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)])


def records_to_batch_by_rows(
    chunks: Iterable[bytes], broker: str, tags: frozenset[str] | None = None
) -> pa.RecordBatch:
    """:func:`records_to_batch` one record at a time (bad UTF-8 replaced): the reference decoder.

    ``tags``: keep only records whose tag is in the set (the broker filtered by hash already).
    Variable-size columns (keys, properties) are built flat with offsets, one Arrow array each.
    """
    topics: list[str] = []
    qids: list[int] = []
    offsets: list[int] = []
    ids: list[str] = []
    tag_col: list[str | None] = []
    key_offsets = [0]
    key_values: list[str] = []
    bodies: list[bytes] = []
    prop_offsets = [0]
    prop_keys: list[str] = []
    prop_values: list[str] = []
    born: list[int] = []
    stored: list[int] = []
    reconsumes: list[int] = []
    topic_cache: dict[bytes, str] = {}
    for buf in chunks:
        try:
            records = list(iter_records(buf))
        except MessageDecodeError as exc:
            raise ValueError(f"not a pymq record: {exc}") from exc
        for (_total, _crc, _flag, sys_flag, born_ts, _bh, reconsume, _prep, qid, qoff, phys, store_ts,
             store_host, body_at, topic_at, props_at, end) in records:  # fmt: skip
            traw = buf[topic_at : props_at - 2]
            props = buf[props_at:end]
            tag = uniq = None
            nprops = 0
            for item in props.split(b"\x02"):
                if not item:
                    continue
                k, _, v = item.partition(b"\x01")
                ks = k.decode(errors="replace")
                vs = v.decode(errors="replace")
                prop_keys.append(ks)
                prop_values.append(vs)
                nprops += 1
                if ks == "TAGS":
                    tag = vs
                elif ks == "UNIQ_KEY":
                    uniq = vs
                elif ks == "KEYS":
                    key_values.extend(x for x in vs.split(" ") if x)
            if tags is not None and tag not in tags:
                del prop_keys[len(prop_keys) - nprops :]
                del prop_values[len(prop_values) - nprops :]
                del key_values[key_offsets[-1] :]
                continue
            topic = topic_cache.get(traw)
            if topic is None:
                topic = topic_cache[traw] = bytes(traw).decode()
            body = buf[body_at : topic_at - 2]
            bodies.append(zlib.decompress(body) if sys_flag & SYSFLAG_COMPRESSED else body)
            topics.append(topic)
            qids.append(qid)
            offsets.append(qoff)
            ids.append(uniq or offset_msg_id(store_host, phys))
            tag_col.append(tag)
            key_offsets.append(len(key_values))
            prop_offsets.append(len(prop_keys))
            born.append(born_ts)
            stored.append(store_ts)
            reconsumes.append(reconsume)
    rows = len(topics)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(topics, pa.string()),
            pa.array([broker] * rows, pa.string()),
            pa.array(qids, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(ids, pa.string()),
            pa.array(tag_col, pa.string()),
            pa.ListArray.from_arrays(pa.array(key_offsets, pa.int32()), pa.array(key_values, pa.string())),
            pa.array(bodies, pa.binary()),
            pa.MapArray.from_arrays(
                pa.array(prop_offsets, pa.int32()), pa.array(prop_keys, pa.string()), pa.array(prop_values, pa.string())
            ),
            _timestamps(born),
            _timestamps(stored),
            pa.array(reconsumes, pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )


_MS_TO_US = pa.scalar(1000, pa.int64())


def _timestamps(ms: Sequence[int]) -> pa.Array:
    return _ms_to_timestamps(pa.array(ms, pa.int64()))


def _ms_to_timestamps(ms: pa.Array) -> pa.Array:
    return pc.multiply(ms, _MS_TO_US).cast(pa.timestamp("us", tz="UTC"))
