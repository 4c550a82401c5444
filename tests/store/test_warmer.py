"""The commitlog warmer: pages prefaulted ahead of the writer, the next file created ahead, no corruption."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from pymq.broker.store import MessageStore, mapped_file
from pymq.broker.store.mapped_file import MappedFile
from pymq.protocol.record import parse_record
from tests.helpers import wait_until_sync
from tests.store.conftest import StoreFactory
from tests.store.storeutil import read_queue, record

FILE = 256 * 1024


def _write_and_verify(store: MessageStore, rounds: int) -> None:
    """Write random-sized batches across several files and read every record back byte for byte."""
    rng = random.Random(7)
    sent: list[tuple[bytes, object]] = []
    for i in range(rounds):
        recs = [record("T", os.urandom(rng.randint(10, 6000)), uniq=f"u{i}-{j}") for j in range(rng.randint(1, 20))]
        for rec, res in zip(recs, store.put("T", i % 3, b"".join(recs)), strict=True):
            sent.append((rec, res))
    assert len(store.commitlog.mfq.files) >= 5
    for rec, res in sent:
        stored = store.read_record(res.physical_offset)  # type: ignore[attr-defined]
        assert stored is not None
        stored = bytes(stored)
        assert stored[:48] == rec[:48] and stored[84:] == rec[84:]
        parse_record(stored, check_crc=True)
    for qid in range(3):
        expected = [res.physical_offset for _rec, res in sent if res.queue_id == qid]  # type: ignore[attr-defined]
        assert [r.physical_offset for r in read_queue(store, "T", qid)] == expected


def test_writes_while_warming_read_back_intact(new_store: StoreFactory) -> None:
    """With the warmer prefaulting ahead (madvise), records written across rollovers read back intact."""
    store = new_store(commitlog_file_size=FILE)
    _write_and_verify(store, 150)


def test_writes_while_warming_with_pwrite_read_back_intact(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pwrite fallback writes zeros into the file; with chunks close behind the writer nothing is lost."""
    monkeypatch.setattr(mapped_file, "_populate_ok", False)
    monkeypatch.setattr(mapped_file, "WARM_CHUNK", 8192)
    monkeypatch.setattr(mapped_file, "RESERVE_STEP", 4096)
    store = new_store(commitlog_file_size=FILE)
    _write_and_verify(store, 150)


def test_the_preallocated_next_file_is_used(new_store: StoreFactory) -> None:
    """The warmer creates and warms the next commitlog file; the writer rolls over into that very file."""
    store = new_store(commitlog_file_size=FILE)
    mfq = store.commitlog.mfq
    for roll in range(3):
        wait_until_sync(lambda: mfq.next_file is not None and mfq.next_file.warmed, what="next file warmed")
        nxt = mfq.next_file
        last = mfq.last
        assert nxt is not None and last is not None and nxt.file_from == last.file_to
        while mfq.last is last:
            store.put("T", 0, record("T", b"x" * 3000))
        assert mfq.last is nxt, f"roll {roll}"
    assert len(read_queue(store, "T", 0)) == store.max_offset("T", 0)


def test_warm_step_never_touches_the_reserved_region(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """warm_step only claims chunks at or above ``reserved``; data the writer put below it survives."""
    monkeypatch.setattr(mapped_file, "_populate_ok", False)  # the pwrite path, which writes bytes
    monkeypatch.setattr(mapped_file, "WARM_CHUNK", 4096)
    monkeypatch.setattr(mapped_file, "RESERVE_STEP", 4096)
    mf = MappedFile(tmp_path / f"{0:020d}", 64 * 1024, create=True)
    mf.enable_warming(0)
    mf.reserve(100)
    assert mf.reserved == 4196 and not mf.warmed
    mf.mm[0:100] = b"\x55" * 100
    while mf.warm_step(ahead=1 << 20):
        assert mf.warm_busy == (0, 0)
    assert mf.warmed and mf.warm_pos == mf.size and mf.mm[0:100] == b"\x55" * 100
    mf.destroy()


def test_closing_a_file_waits_for_the_warmer(tmp_path: Path) -> None:
    """A closed file is never warmed (the warmer must not use a released mapping or descriptor)."""
    mf = MappedFile(tmp_path / f"{0:020d}", 64 * 1024, create=True)
    mf.enable_warming(0)
    mf.close()
    assert mf.warm_step(ahead=1 << 20) is False and mf.warm_pos == 0
    (tmp_path / f"{0:020d}").unlink()


def test_write_back_syncs_the_warmed_chunk_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SYNC_FLUSH's write-ahead: the warmed chunk is msynced piece by piece; no flushed position moves."""
    calls: list[tuple[int, int]] = []
    real = mapped_file._msync
    assert real is not None

    def recording_msync(address: int, length: int, flags: int) -> int:
        calls.append((address, length))
        return int(real(address, length, flags))

    monkeypatch.setattr(mapped_file, "_msync", recording_msync)
    monkeypatch.setattr(mapped_file, "WARM_CHUNK", 64 * 1024)
    monkeypatch.setattr(mapped_file, "WRITE_BACK_PIECE", 16 * 1024)
    mf = MappedFile(tmp_path / f"{0:020d}", 256 * 1024, create=True)
    mf.enable_warming(0)
    assert mf.warm_step(ahead=1 << 20) and calls == []  # no write-back unless asked
    assert mf.warm_step(ahead=1 << 20, write_back=True)
    assert calls == [(mf.address + 64 * 1024 + i * 16 * 1024, 16 * 1024) for i in range(4)]
    assert mf.flushed_pos == 0 and mf.warm_busy == (0, 0)
    mf.close()
    assert mf.warm_step(ahead=1 << 20, write_back=True) is False and len(calls) == 4
    (tmp_path / f"{0:020d}").unlink()


def test_warming_by_pwrite_leaves_the_mapping_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the commitlog writing by pwrite (SYNC_FLUSH) the warmer writes its zeros with pwrite too:
    no MADV_POPULATE_WRITE (pages dirtied through the mapping make their syncs dearer), the chunk
    reads as zeros, and what the writer put below ``reserved`` survives."""
    advised: list[int] = []
    real = mapped_file._madvise

    def recording_madvise(address: int, length: int, advice: int) -> int:
        advised.append(advice)
        return int(real(address, length, advice)) if real is not None else -1

    monkeypatch.setattr(mapped_file, "_madvise", recording_madvise)
    monkeypatch.setattr(mapped_file, "WARM_CHUNK", 64 * 1024)
    monkeypatch.setattr(mapped_file, "RESERVE_STEP", 4096)
    mf = MappedFile(tmp_path / f"{0:020d}", 256 * 1024, create=True)
    mf.enable_warming(0)
    mf.reserve(100)
    os.pwrite(mf.fd, b"written", 0)
    assert mf.warm_step(ahead=1 << 20, by_pwrite=True)
    assert advised == [] and mf.warm_pos == 4196 + 64 * 1024
    assert bytes(mf.view()[:7]) == b"written" and bytes(mf.view()[4196 : mf.warm_pos]) == bytes(64 * 1024)
    assert mf.warm_step(ahead=1 << 20)  # through the mapping otherwise (where the kernel has it)
    assert advised in ([mapped_file._MADV_POPULATE_WRITE], [])
    mf.close()
    (tmp_path / f"{0:020d}").unlink()


def test_warming_by_pwrite_writes_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pwrite holds the file's inode lock throughout and the loop's record pwrite waits for it: the
    warmer writes a chunk in PREFAULT_PIECE pieces (8 MiB at once stalled the loop for milliseconds)."""
    sizes: list[int] = []
    real_pwrite = os.pwrite

    def recording_pwrite(fd: int, data: memoryview, at: int) -> int:
        sizes.append(len(data))
        return real_pwrite(fd, data, at)

    monkeypatch.setattr(mapped_file.os, "pwrite", recording_pwrite)
    monkeypatch.setattr(mapped_file, "WARM_CHUNK", 256 * 1024)
    monkeypatch.setattr(mapped_file, "PREFAULT_PIECE", 64 * 1024)
    mf = MappedFile(tmp_path / f"{0:020d}", 1 << 20, create=True)
    mf.enable_warming(0)
    assert mf.warm_step(ahead=1 << 20, by_pwrite=True)
    assert sizes == [64 * 1024] * 4 and mf.warm_pos == 256 * 1024
    assert bytes(mf.view()[: mf.warm_pos]) == bytes(256 * 1024)
    mf.close()
    (tmp_path / f"{0:020d}").unlink()


@pytest.mark.parametrize(
    ("flush", "write_ahead", "expected"),
    [("SYNC_FLUSH", True, True), ("SYNC_FLUSH", False, False), ("ASYNC_FLUSH", True, False)],
)
def test_the_warmer_writes_back_only_under_sync_flush(
    new_store: StoreFactory, flush: str, write_ahead: bool, expected: bool
) -> None:
    store = new_store(commitlog_file_size=FILE, flush_disk_type=flush, sync_flush_write_ahead=write_ahead)
    assert store.services.warmer is not None and store.services.warmer.write_back is expected
    store.put("T", 0, record("T", b"x" * 100))
    assert len(read_queue(store, "T", 0)) == 1
