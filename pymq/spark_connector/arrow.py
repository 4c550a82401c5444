"""Stored records straight to Arrow columns, without a Python message object per record."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import pyarrow as pa

from pymq.errors import MessageDecodeError
from pymq.protocol.record import SYSFLAG_COMPRESSED, iter_records, offset_msg_id

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


def records_to_batch(chunks: Iterable[bytes], broker: str, tags: frozenset[str] | None = None) -> pa.RecordBatch:
    """Decode concatenated records (pull response bodies) into one RecordBatch of the source schema.

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


def _timestamps(ms: list[int]) -> pa.Array:
    import pyarrow.compute as pc

    return pc.multiply(pa.array(ms, pa.int64()), _MS_TO_US).cast(pa.timestamp("us", tz="UTC"))
