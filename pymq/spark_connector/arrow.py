"""Stored records straight to Arrow columns, without a Python message object per record."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

import pyarrow as pa

from pymq.protocol.record import BLANK_MAGIC, BODY_POS, FIXED, MAGIC, SYSFLAG_COMPRESSED, offset_msg_id

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

_U16 = struct.Struct(">H")


def records_to_batch(
    chunks: Iterable[bytes | memoryview], broker: str, tags: frozenset[str] | None = None
) -> pa.RecordBatch:
    """Decode concatenated records (pull response bodies) into one RecordBatch of the source schema.

    ``tags``: keep only records whose tag is in the set (the broker filtered by hash already).
    """
    topics: list[str] = []
    qids: list[int] = []
    offsets: list[int] = []
    ids: list[str] = []
    tag_col: list[str | None] = []
    keys_col: list[list[str]] = []
    bodies: list[bytes] = []
    props_col: list[list[tuple[str, str]]] = []
    born: list[int] = []
    stored: list[int] = []
    reconsumes: list[int] = []
    topic_cache: dict[bytes, str] = {}
    unpack = FIXED.unpack_from
    for buf in chunks:
        pos = 0
        n = len(buf)
        while n - pos >= 8:
            (total, magic, _crc, _flag, sys_flag, born_ts, _bh, reconsume, _prep, qid, qoff, phys, store_ts,
             store_host, body_len) = unpack(buf, pos)  # fmt: skip
            if magic == BLANK_MAGIC:
                break
            if magic != MAGIC:
                raise ValueError(f"not a pymq record at byte {pos}")
            end = pos + total
            p = pos + BODY_POS
            body = bytes(buf[p : p + body_len])
            p += body_len
            tl = _U16.unpack_from(buf, p)[0]
            traw = bytes(buf[p + 2 : p + 2 + tl])
            topic = topic_cache.get(traw) or topic_cache.setdefault(traw, traw.decode())
            items = []
            tag = uniq = None
            keys: list[str] = []
            for item in bytes(buf[p + 4 + tl : end]).split(b"\x02"):
                if not item:
                    continue
                k, _, v = item.partition(b"\x01")
                ks, vs = k.decode(errors="replace"), v.decode(errors="replace")
                items.append((ks, vs))
                if ks == "TAGS":
                    tag = vs
                elif ks == "UNIQ_KEY":
                    uniq = vs
                elif ks == "KEYS":
                    keys = [x for x in vs.split(" ") if x]
            pos = end
            if tags is not None and tag not in tags:
                continue
            if sys_flag & SYSFLAG_COMPRESSED:
                body = zlib.decompress(body)
            topics.append(topic)
            qids.append(qid)
            offsets.append(qoff)
            ids.append(uniq or offset_msg_id(store_host, phys))
            tag_col.append(tag)
            keys_col.append(keys)
            bodies.append(body)
            props_col.append(items)
            born.append(born_ts * 1000)
            stored.append(store_ts * 1000)
            reconsumes.append(reconsume)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(topics, pa.string()),
            pa.array([broker] * len(topics), pa.string()),
            pa.array(qids, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(ids, pa.string()),
            pa.array(tag_col, pa.string()),
            pa.array(keys_col, pa.list_(pa.string())),
            pa.array(bodies, pa.binary()),
            pa.array(props_col, pa.map_(pa.string(), pa.string())),
            pa.array(born, pa.timestamp("us", tz="UTC")),
            pa.array(stored, pa.timestamp("us", tz="UTC")),
            pa.array(reconsumes, pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )
