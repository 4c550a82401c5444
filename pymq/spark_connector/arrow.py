"""Stored records straight to Arrow columns, without a Python message object per record.

:func:`records_to_batch` is columnar: one scan gives each record's fixed fields and the
spans of its body, topic and properties; bodies, topics and properties are then cut out of
the pull buffer by Arrow (``take`` over a binary array whose offsets are those spans), and
the properties are split and searched by Arrow's compute kernels. Python touches each
record once, in the scan. A chunk Arrow cannot take as UTF-8 goes through the row-by-row
decoder (:func:`records_to_batch_by_rows`, which replaces bad bytes), which is also the
reference the columnar one is tested against.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pymq.errors import MessageDecodeError
from pymq.protocol.record import SYSFLAG_COMPRESSED, iter_records, offset_msg_id
from pymq.protocol.record_columns import RecordColumns, record_columns

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
    if len(buf) >= _MAX_SPAN_BYTES:  # Arrow's binary offsets are 32-bit
        return records_to_batch_by_rows([bytes(buf)], broker, tags)
    cols = record_columns(buf)
    if cols.error is not None:
        raise ValueError(f"not a pymq record: {cols.error}") from cols.error
    if not cols.records:
        return _empty_batch()
    try:
        return _columnar(buf, cols, broker, tags)
    except (pa.ArrowInvalid, _NotColumnar):  # e.g. not UTF-8 where a string is expected: decode with replacement
        return records_to_batch_by_rows([bytes(buf)], broker, tags)


_MAX_SPAN_BYTES = 1 << 31
# Arrow scalars, not Python values: converting a Python value tries to import optional modules on every call.
_EMPTY = pa.scalar("", pa.string())
_ZERO = pa.scalar(0, pa.int32())
_ONE = pa.scalar(1, pa.int32())
_COMPRESSED = pa.scalar(SYSFLAG_COMPRESSED, pa.int32())


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


def _columnar(buf: bytes | memoryview, cols: RecordColumns, broker: str, tags: frozenset[str] | None) -> pa.RecordBatch:
    """The batch of the records ``cols`` (:func:`record_columns` of ``buf``), cut out of ``buf`` by Arrow."""
    n = cols.records
    spans = pa.BinaryArray.from_buffers(pa.binary(), 6 * n, [None, pa.py_buffer(cols.bounds), pa.py_buffer(buf)])
    bodies = spans.take(_every(6, 0, n))
    topics = spans.take(_every(6, 2, n)).cast(pa.string())
    props = spans.take(_every(6, 4, n)).cast(pa.string())
    flags = _column(pa.int32(), n, cols.sys_flags)
    if pc.any(pc.not_equal(pc.bit_wise_and(flags, _COMPRESSED), _ZERO)).as_py():
        raw = bodies.to_pylist()
        bodies = pa.array(
            [zlib.decompress(b) if f & SYSFLAG_COMPRESSED else b for b, f in zip(raw, flags.to_pylist(), strict=True)],
            pa.binary(),
        )
    items = _without_empty(pc.split_pattern(props, "\x02"))
    pairs = pc.split_pattern(items.values, "\x01", max_splits=1)
    if len(pairs) and pc.min(pc.list_value_length(pairs)).as_py() != 2:
        raise _NotColumnar("a property without a name/value separator")
    flat = pairs.values
    names = flat.take(_every(2, 0, len(flat) // 2))
    values = flat.take(_every(2, 1, len(flat) // 2))
    tag_col = _value_of("TAGS", names, values, items.offsets)
    uniq = _value_of("UNIQ_KEY", names, values, items.offsets)
    ids = uniq
    if uniq.null_count or pc.any(pc.equal(uniq, _EMPTY)).as_py():  # a record without a unique key: its offset id
        hosts, phys = cols.store_hosts, array("q", cols.physical)
        ids = pa.array(
            [u or offset_msg_id(hosts[8 * i : 8 * i + 8], phys[i]) for i, u in enumerate(uniq.to_pylist())],
            pa.string(),
        )
    keys = _without_empty(pc.split_pattern(pc.fill_null(_value_of("KEYS", names, values, items.offsets), _EMPTY), " "))
    batch = pa.RecordBatch.from_arrays(
        [
            topics,
            pc.fill_null(pa.nulls(n, pa.string()), pa.scalar(broker, pa.string())),
            _column(pa.int32(), n, cols.queue_ids),
            _column(pa.int64(), n, cols.queue_offsets),
            ids,
            tag_col,
            keys,
            bodies,
            pa.MapArray.from_arrays(items.offsets, names, values),
            _ms_to_timestamps(_column(pa.int64(), n, cols.born)),
            _ms_to_timestamps(_column(pa.int64(), n, cols.stored)),
            _column(pa.int32(), n, cols.reconsumes),
        ],
        schema=ARROW_SCHEMA,
    )
    if tags is not None:
        batch = batch.filter(pc.is_in(tag_col, value_set=pa.array(sorted(tags), pa.string())))
    return batch


_INDEXES: dict[tuple[int, int], pa.Array] = {}


def _every(step: int, start: int, count: int) -> pa.Array:
    """int32 ``start, start + step, ...``, ``count`` of them (take indexes): made once per
    (step, start) and grown by doubling, not built from Python ints per batch."""
    have = _INDEXES.get((step, start))
    if have is None or len(have) < count:
        size = max(count, 2 * len(have) if have is not None else 0, 1024)
        have = _INDEXES[step, start] = pa.array(range(start, start + step * size, step), pa.int32())
    return have.slice(0, count)


def _column(kind: pa.DataType, n: int, data: bytes) -> pa.Array:
    """``n`` native integers of ``data`` as an Arrow array (no copy)."""
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)])


class _NotColumnar(Exception):
    """A chunk the columnar decoder does not take (the row decoder does)."""


def _value_of(name: str, names: pa.Array, values: pa.Array, offsets: pa.Array) -> pa.Array:
    """Per row, the value of its property ``name`` (the last one if repeated), null if it has none.

    ``names``/``values`` are every row's properties, flat; row ``i`` owns ``offsets[i]:offsets[i+1]``.
    """
    hit = pc.cast(pc.equal(names, pa.scalar(name, pa.string())), pa.int32())
    seen = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(hit)])  # hits before each item
    upto = pc.take(seen, offsets)  # hits before each row's first item, and after its last
    after, before = upto[1:], upto[:-1]
    found = pc.greater(pc.subtract(after, before), _ZERO)
    pick = pc.if_else(found, pc.subtract(after, _ONE), pa.scalar(None, pa.int32()))
    return pc.take(values.filter(pc.cast(hit, pa.bool_())), pick)


def _without_empty(lists: pa.ListArray) -> pa.ListArray:
    """``lists`` with the empty strings taken out of every list (keeps the row count)."""
    values = lists.values
    keep = pc.not_equal(values, _EMPTY)
    if pc.all(keep).as_py():
        return lists
    kept = pc.cumulative_sum(pc.cast(keep, pa.int32()))
    ends = pc.take(kept, pc.subtract(lists.offsets[1:], _ONE))
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cast(ends, pa.int32())])
    return pa.ListArray.from_arrays(offsets, values.filter(keep))


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
