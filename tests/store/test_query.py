"""Query by key: unique and business keys, slot and hash collisions, time ranges, limits."""

from __future__ import annotations

import time

import pytest

from pymq.broker.store import MessageStore
from pymq.broker.store.index import key_hash
from pymq.protocol.record import parse_record
from tests.store.storeutil import keyed, record

#: Two keys whose "T#key" strings have the same crc32 (found by a brute-force search).
COLLIDING = ("c29685295", "c32060020")


def _bodies(found: list[memoryview]) -> list[bytes]:
    return [bytes(parse_record(r, check_crc=True).body) for r in found]


def test_query_by_unique_key_and_business_keys(store: MessageStore) -> None:
    """A record is found by its UNIQ_KEY and by each space-separated KEYS token, newest first."""
    store.put("T", 0, record("T", b"one", uniq="UID-1", keys=["order-7", "cust-3"]))
    store.put("T", 1, record("T", b"two", uniq="UID-2", keys=["order-7"]))
    assert _bodies(store.query_by_key("T", "UID-1")) == [b"one"]
    assert _bodies(store.query_by_key("T", "cust-3")) == [b"one"]
    assert _bodies(store.query_by_key("T", "order-7")) == [b"two", b"one"]
    assert store.query_by_key("T", "order") == [] and store.query_by_key("T", "missing") == []


def test_keys_are_per_topic(store: MessageStore) -> None:
    """The index key is topic#key: the same key under another topic is not returned."""
    store.put("T", 0, record("T", b"t", keys=["k"]))
    store.put("U", 0, record("U", b"u", keys=["k"]))
    assert _bodies(store.query_by_key("T", "k")) == [b"t"]
    assert _bodies(store.query_by_key("U", "k")) == [b"u"]


def test_slot_collisions_are_filtered_by_the_stored_key(store: MessageStore) -> None:
    """With 8 hash slots most keys share a slot; each query still returns only its own key's records."""
    assert store.config.index_hash_slots == 8
    for i in range(30):
        store.put("T", i % 4, keyed(i))
    slots = {key_hash(f"T#K{i}".encode()) % 8 for i in range(30)}
    assert len(slots) < 30  # the chains really are shared
    for i in range(30):
        found = store.query_by_key("T", f"K{i}")
        assert [parse_record(r).properties for r in found] == [
            f"UNIQ_KEY\x01U{i}\x02TAGS\x01{'A' if i % 2 else 'B'}\x02KEYS\x01K{i}\x02".encode()
        ]


def test_hash_collisions_are_filtered_by_the_stored_key(store: MessageStore) -> None:
    """Two keys with the same 32-bit hash share index entries; the store returns only the key asked for."""
    a, b = COLLIDING
    assert key_hash(f"T#{a}".encode()) == key_hash(f"T#{b}".encode())
    store.put("T", 0, record("T", b"A1", keys=[a]) + record("T", b"B1", keys=[b]))
    store.put("T", 0, record("T", b"A2", uniq=a))
    assert len(store.index.lookup(f"T#{a}".encode(), 0, 2**62, 100)) == 3  # the index cannot tell them apart
    assert _bodies(store.query_by_key("T", a)) == [b"A2", b"A1"]
    assert _bodies(store.query_by_key("T", b)) == [b"B1"]


def test_query_time_range_and_max_count(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only records stored within [begin, end] are returned, newest first, at most max_count."""
    clock = [2_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    for i in range(10):
        clock[0] = 2_000_000.0 + 10 * i  # one record every 10 s
        store.put("T", 0, record("T", f"r{i}".encode(), keys=["same"]))
    monkeypatch.undo()
    base = 2_000_000_000
    assert _bodies(store.query_by_key("T", "same", 100)) == [f"r{i}".encode() for i in range(9, -1, -1)]
    assert _bodies(store.query_by_key("T", "same", 3)) == [b"r9", b"r8", b"r7"]
    got = store.query_by_key("T", "same", 100, begin_ts=base + 20_000, end_ts=base + 50_000)
    assert _bodies(got) == [b"r5", b"r4", b"r3", b"r2"]
    got = store.query_by_key("T", "same", 100, begin_ts=base + 20_001, end_ts=base + 49_999)
    assert _bodies(got) == [b"r4", b"r3"]
    assert store.query_by_key("T", "same", 100, begin_ts=base + 100_000) == []


def test_query_spans_index_files(store: MessageStore) -> None:
    """A key whose records landed in several index files is found in all of them."""
    for i in range(80):  # 2 entries per record, 63 per file: three index files
        keys = ["hot"] if i % 10 == 0 else [f"cold{i}"]
        store.put("T", 0, record("T", f"r{i}".encode(), keys=keys, uniq=f"u{i}"))
    assert len(store.index.files) == 3
    assert _bodies(store.query_by_key("T", "hot", 100)) == [f"r{i}".encode() for i in range(70, -1, -10)]
