"""Helpers for the store tests: small configurations, record builders, raw file readers."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.store import MessageStore
from pymq.config import StoreConfig
from pymq.protocol import record as record_module
from pymq.protocol.record import encode_record, pack_host, parse_record

#: Tiny files so that every rollover happens within a few records.
SMALL = {
    "commitlog_file_size": 16 * 1024,
    "consume_queue_file_entries": 16,
    "index_hash_slots": 8,
    "index_max_entries": 64,
    # The background cleaner must not act on its own during a test: tests call run_cleanup().
    "cleanup_interval_ms": 3_600_000,
    "delete_when": "04",
}

BORN_HOST = pack_host("10.1.2.3", 45678)


def make_config(root: Path, **overrides: Any) -> StoreConfig:
    values = {**SMALL, **overrides}
    return StoreConfig(store_dir=root, **values)


STORE_HOST = "192.168.7.9:10911"


def open_store(root: Path, **overrides: Any) -> MessageStore:
    store = MessageStore(make_config(root, **overrides), store_host=STORE_HOST)
    store.start()
    return store


def record(
    topic: str = "T",
    body: bytes = b"hello",
    *,
    tags: str | None = None,
    keys: Iterable[str] = (),
    uniq: str | None = None,
    delay: int = 0,
    props: dict[str, str] | None = None,
    flag: int = 0,
    born_timestamp: int = 1_700_000_000_000,
) -> bytes:
    """One record as a producer encodes it (broker block left at zero)."""
    parts = []
    if uniq is not None:
        parts.append(b"UNIQ_KEY\x01" + uniq.encode() + b"\x02")
    if tags is not None:
        parts.append(b"TAGS\x01" + tags.encode() + b"\x02")
    keys = list(keys)
    if keys:
        parts.append(b"KEYS\x01" + " ".join(keys).encode() + b"\x02")
    if delay:
        parts.append(b"DELAY\x01" + str(delay).encode() + b"\x02")
    for k, v in (props or {}).items():
        parts.append(k.encode() + b"\x01" + v.encode() + b"\x02")
    return encode_record(
        topic.encode(),
        body,
        b"".join(parts),
        flag=flag,
        born_timestamp=born_timestamp,
        born_host=BORN_HOST,
    )


def keyed(i: int, topic: str = "T", size: int = 40) -> bytes:
    """Record ``i`` with a unique key ``U<i>``, business key ``K<i>`` and tag ``A``/``B``."""
    body = (f"message-{i}-".encode() * (size // 10 + 1))[:size]
    return record(topic, body, tags="A" if i % 2 else "B", keys=[f"K{i}"], uniq=f"U{i}")


def records_of(result: Any) -> list[Any]:
    """Parse every record of a GetResult's buffers, checking each body CRC."""
    out = []
    for buf in result.buffers:
        pos = 0
        while pos < len(buf):
            r = parse_record(buf, pos, check_crc=True)
            out.append(r)
            pos += r.total_size
    return out


def bodies(result: Any) -> list[bytes]:
    return [bytes(r.body) for r in records_of(result)]


def read_queue(store: MessageStore, topic: str, qid: int, start: int = 0) -> list[Any]:
    """Every record of a queue from ``start``, through get_messages."""
    out = []
    offset = start
    while True:
        res = store.get_messages("g", topic, qid, offset, 64, 1 << 30)
        if not res.message_count:
            return out
        out.extend(records_of(res))
        offset = res.next_begin_offset


def cq_entries(path: Path) -> list[tuple[int, int, int]]:
    """The non-zero 20-byte entries of a consume-queue file."""
    raw = path.read_bytes()
    out = []
    for e in struct.iter_unpack(">qiq", raw):
        if e == (0, 0, 0):
            break
        out.append(e)
    return out


def use_c_syncer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give stores the C syncer even where PYMQ_NO_SPEEDUPS switched the accelerator off (skip where
    it is not built; tests/unit/test_syncer.py checks it is built wherever it can be)."""
    if getattr(record_module._speedups, "Syncer", None) is None:
        pytest.skip("no C accelerator here")
    monkeypatch.setattr(record_module, "speedups", record_module._speedups)
