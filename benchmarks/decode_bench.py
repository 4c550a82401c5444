"""Client decode of one pull answer: a 1 MiB buffer of 1 KiB records, eager vs lazy MessageExt.

    python benchmarks/decode_bench.py [--body-size 1024] [--buffer-bytes 1048576] [--repeat 30] [--json]

"eager" rebuilds what decode_message did before messages became lazy (issue 19): body,
topic and properties copied out of the buffer for every record, into a slotted object.
"lazy" is today's ``iter_messages``; the other rows add what a listener typically touches.
Each figure is the best of ``--repeat`` runs, in µs per message; the ratios compare rows of
this run (the machine may be noisy, the ratios much less so).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

from pymq.protocol.message import MessageExt, iter_messages
from pymq.protocol.record import (
    SYSFLAG_COMPRESSED,
    decode_properties,
    encode_properties,
    encode_record,
    iter_records,
    offset_msg_id,
    pack_host,
)


class _EagerMessage:
    __slots__ = (
        "_born_host", "_properties", "_props_raw", "_store_host", "body", "body_crc", "born_timestamp",
        "broker_name", "commitlog_offset", "flag", "prepared_tx_offset", "queue_id", "queue_offset",
        "reconsume_times", "store_size", "store_timestamp", "sys_flag", "topic",
    )  # fmt: skip


def eager(buf: memoryview) -> list[Any]:
    """The decode before issue 19 (pymq 923a20f's ``_message``), field for field."""
    out = []
    topics: dict[bytes, str] = {}
    for fields in iter_records(buf):
        (
            total, crc, flag, sys_flag, born_ts, born_host, reconsume, prepared,
            queue_id, queue_offset, physical, store_ts, store_host, body_at, topic_at, props_at, end,
        ) = fields  # fmt: skip
        body = bytes(buf[body_at : topic_at - 2])
        if sys_flag & SYSFLAG_COMPRESSED:
            body = zlib.decompress(body)
        m = _EagerMessage.__new__(_EagerMessage)
        raw_topic = bytes(buf[topic_at : props_at - 2])
        topic = topics.get(raw_topic)
        if topic is None:
            topic = topics[raw_topic] = raw_topic.decode()
        m.topic = topic
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
        m.broker_name = "broker-a"
        out.append(m)
    return out


def eager_everything(buf: memoryview) -> list[Any]:
    """What the old MessageExt did when a listener read the body, properties, offset and msg id."""
    msgs = eager(buf)
    for m in msgs:
        m._properties = props = decode_properties(m._props_raw)
        m.body, m.queue_offset, props.get("UNIQ_KEY") or offset_msg_id(m._store_host, m.commitlog_offset)
    return msgs


def eager_tags(buf: memoryview) -> list[Any]:
    """The old tag filter: the whole property map decoded for each message."""
    msgs = eager(buf)
    for m in msgs:
        m._properties = decode_properties(m._props_raw)
        m._properties.get("TAGS")
    return msgs


def lazy(buf: memoryview) -> list[MessageExt]:
    return list(iter_messages(buf, broker_name="broker-a"))


def lazy_body(buf: memoryview) -> list[MessageExt]:
    msgs = lazy(buf)
    for m in msgs:
        m.body  # noqa: B018
    return msgs


def lazy_tags(buf: memoryview) -> list[MessageExt]:
    msgs = lazy(buf)
    for m in msgs:
        m.tags  # noqa: B018
    return msgs


def lazy_everything(buf: memoryview) -> list[MessageExt]:
    msgs = lazy(buf)
    for m in msgs:
        m.body, m.properties, m.queue_offset, m.msg_id  # noqa: B018
    return msgs


def pull_buffer(body_size: int, buffer_bytes: int) -> tuple[memoryview, int]:
    records = []
    size = i = 0
    host = pack_host("10.0.0.1", 10911)
    props = encode_properties({"TAGS": "TagA", "KEYS": "order-1", "UNIQ_KEY": "7F0000010B1A18B4AAC2000000000000"})
    while True:
        rec = encode_record(
            b"BenchTopic", os.urandom(body_size), props, queue_offset=i, physical_offset=size, store_host=host
        )
        if size + len(rec) > buffer_bytes:
            break
        records.append(rec)
        size += len(rec)
        i += 1
    return memoryview(b"".join(records)), i


def best_us_per_message(fn: Callable[[memoryview], Any], buf: memoryview, count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(buf)
        best = min(best, time.perf_counter() - t0)
    return best / count * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--buffer-bytes", type=int, default=1 << 20)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    buf, count = pull_buffer(args.body_size, args.buffer_bytes)
    rows = {
        name: best_us_per_message(fn, buf, count, args.repeat)
        for name, fn in [
            ("eager", eager),
            ("lazy", lazy),
            ("lazy+body", lazy_body),
            ("eager+tags", eager_tags),
            ("lazy+tags", lazy_tags),
            ("eager+body+properties+msg_id", eager_everything),
            ("lazy+body+properties+msg_id", lazy_everything),
        ]
    }
    if args.json:
        print(json.dumps({"messages": count, "us_per_message": rows}, indent=2))
        return
    # each lazy row against the eager row that touches the same (eager always copies the body)
    counterpart = {
        "lazy": "eager",
        "lazy+body": "eager",
        "lazy+tags": "eager+tags",
        "lazy+body+properties+msg_id": "eager+body+properties+msg_id",
    }
    print(f"{count} records of {args.body_size} B in {len(buf)} B, best of {args.repeat}")
    for name, us in rows.items():
        vs = counterpart.get(name)
        speedup = f"   {vs}/this {rows[vs] / us:5.2f}x" if vs else ""
        print(f"  {name:<30} {us:6.3f} us/msg{speedup}")


if __name__ == "__main__":
    main()
