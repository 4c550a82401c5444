"""The store's files are byte-identical with the C accelerator and with the pure-Python record code.

The same requests (good and bad records, delays, keys, tags, file rollovers) go through the
broker's put path into two stores, one per implementation, at the same store time; their
answers and every commitlog, consume-queue and index byte must agree.
"""

from __future__ import annotations

import struct
import time
import types
from pathlib import Path

import pytest

from pymq.broker.store import lifecycle as store_lifecycle
from pymq.broker.store import message_store
from pymq.protocol import record
from tests.store.conftest import PutPathFactory
from tests.store.storeutil import record as make_record

FIXED_NOW = 1_764_000_000.123


def requests() -> list[tuple[str, int, bytes]]:
    good = [
        make_record("T", bytes([i]) * (40 + i * 13), tags=f"tag{i % 3}", keys=[f"k{i}", "shared"], uniq=f"U{i:04d}")
        for i in range(24)
    ]
    delayed = make_record("T", b"later", delay=2, uniq="D1")
    bad_crc = bytearray(good[1])
    struct.pack_into(">I", bad_crc, 8, 12345)  # body CRC
    other_topic = make_record("Other", b"x")
    huge = struct.pack(">i", 2**31 - 1) + good[2][4:]
    return [
        ("T", 0, good[0]),
        ("T", 1, b"".join(good[:16])),
        ("T", 2, good[3] + bytes(bad_crc) + other_topic + good[4]),
        ("T", 0, good[5] + delayed + good[6]),
        ("T", 3, good[7] + huge),
        ("T", 1, good[8] + good[9][:60]),
        ("T", 2, b"".join(good[10:])),
        ("T", 3, b""),
        # single sends (the store's single-record path): tags, keys, no properties, and a rollover
        *[("T", i % 4, good[i]) for i in range(24)],
        ("T", 1, make_record("T", b"no properties")),
        *[("T", (i + j) % 4, good[i]) for j in range(1, 4) for i in range(24)],
    ]


def store_files(root: Path) -> dict[str, bytes]:
    dirs = ("commitlog", "consumequeue", "index")
    return {
        str(p.relative_to(root)): p.read_bytes()
        for d in dirs
        if (root / d).exists()
        for p in sorted((root / d).rglob("*"))
        if p.is_file()
    }


def test_both_implementations_store_the_same_bytes(
    tmp_path: Path, new_put_path: PutPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One store time for both stores: everything else in the files follows from the requests.
    clock = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    clock.time = lambda: FIXED_NOW
    monkeypatch.setattr(message_store, "time", clock)
    monkeypatch.setattr(store_lifecycle, "time", clock)  # (the services start at the store time too)
    answers, files = [], []
    for name, accelerator in (("c", record.speedups), ("python", None)):
        monkeypatch.setattr(record, "speedups", accelerator)
        path = new_put_path(tmp_path / name)
        answers.append([path.put(t, q, data) for t, q, data in requests()])
        path.store.shutdown()
        files.append(store_files(tmp_path / name))
    assert answers[0] == answers[1]
    assert files[0].keys() == files[1].keys() and files[0]
    assert [k for k in files[0] if files[0][k] != files[1][k]] == []
    assert sum(k.startswith("commitlog") for k in files[0]) > 2  # the single sends rolled over too
    # the requests did exercise refusals and the delay hook
    flat = [r.status.name for answer in answers[0] for r in answer]
    assert "MESSAGE_ILLEGAL" in flat and "PUT_OK" in flat


@pytest.mark.parametrize(
    "entries",
    [
        [(1, 10), (9, 11), (17, 12), (0xFFFFFFFF, 13)] * 30,  # chains in one slot, and a rollover
        [(1, 10), (2**32, 11), (3, 12)],  # a hash beyond u32: the Python loop's struct.error
        [(1, 10), (-1, 11)],
        [(1, 10), (2, 2**63)],
        [(1, 10), [2, 11]],  # a list, not a tuple: still the Python loop's answer
    ],
)
def test_index_entries_are_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: list) -> None:
    from pymq.broker.store.index import IndexService

    outcomes, files = [], []
    for name, accelerator in (("c", record.speedups), ("python", None)):
        monkeypatch.setattr(record, "speedups", accelerator)
        index = IndexService(tmp_path / name, 8, 64)
        index.load()
        try:
            index.put_many(entries, 1_764_000_000_000)
            outcomes.append("ok")
        except Exception as exc:
            outcomes.append(f"{type(exc).__name__}: {exc}")
        found = index.lookup(b"x", 0, 2**62, 100)  # the lookups walk what was written
        index.close()
        files.append((found, {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())}))
    assert outcomes[0] == outcomes[1]
    assert files[0][0] == files[1][0]
    assert list(files[0][1].values()) == list(files[1][1].values()) and files[0][1]


@pytest.mark.parametrize("accelerated", [True, False], ids=["c", "python"])
def test_pwrite_and_mapped_writes_store_the_same_bytes(
    tmp_path: Path, new_put_path: PutPathFactory, monkeypatch: pytest.MonkeyPatch, accelerated: bool
) -> None:
    # SYNC_FLUSH writes records with pwrite (store.sync_flush_pwrite), anything else through the
    # mapping: same answers, same reads while running (through the mapping), same file bytes.
    clock = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    clock.time = lambda: FIXED_NOW
    monkeypatch.setattr(message_store, "time", clock)
    monkeypatch.setattr(store_lifecycle, "time", clock)  # (the services start at the store time too)
    monkeypatch.setattr(record, "speedups", record.speedups if accelerated else None)
    answers, reads, files = [], [], []
    for name, pwrite in (("pwrite", True), ("mapped", False)):
        path = new_put_path(tmp_path / name, flush_disk_type="SYNC_FLUSH", sync_flush_pwrite=pwrite)
        assert path.store.commitlog.pwrite is pwrite
        answers.append([path.put(t, q, data) for t, q, data in requests()])
        got = [path.store.get_messages("g", "T", q, 0, max_count=1000) for q in range(4)]
        reads.append([b"".join(bytes(b) for b in g.buffers) for g in got])
        path.store.shutdown()
        files.append(store_files(tmp_path / name))
    assert answers[0] == answers[1]
    assert reads[0] == reads[1] and all(reads[0])
    assert files[0].keys() == files[1].keys() and files[0]
    assert [k for k in files[0] if files[0][k] != files[1][k]] == []
    assert sum(k.startswith("commitlog") for k in files[0]) > 2  # rolled over (blank markers) too
