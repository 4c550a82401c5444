"""Index files made ahead of the roll on the file-maker thread (store/index_next.py): the writer rolls
to a made file, makes it itself only when it is not ready, and a restart ignores a file made
ahead but never used."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.store import MessageStore, PutStatus, index, index_next
from pymq.broker.store.file_maker import MADE
from pymq.broker.store.index import HEADER_SIZE
from pymq.broker.store.map_pool import FD_LESS
from pymq.broker.store.mapped_file import MappedFile
from pymq.testing import capture_logs
from tests.helpers import wait_until_sync
from tests.store.conftest import StoreFactory
from tests.store.storeutil import keyed


def _record_creations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread that creates each index file, in order."""
    threads: list[str] = []

    def making(path: Path, size: int, *, create: bool, lazy: bool = False) -> MappedFile:
        if create:
            threads.append(threading.current_thread().name)
        return MappedFile(path, size, create=create, lazy=lazy)

    monkeypatch.setattr(index, "MappedFile", making)
    monkeypatch.setattr(index_next, "MappedFile", making)
    return threads


def _wait_made(store: MessageStore) -> None:
    """Give the file maker the time it needs: the next file, if queued, is made."""
    nxt = store.index.next
    if nxt is not None:
        wait_until_sync(lambda: nxt.making == MADE, timeout=30, what="the next index file")


def _maker_store(new_store: StoreFactory, **overrides: Any) -> MessageStore | None:
    store = new_store(**overrides)
    if store.map_pool.maker is None:  # (off Linux every file is made on the writer, at the roll)
        assert not FD_LESS and store.index.next is None
        return None
    return store


def _header_written(path: Path) -> bool:
    with path.open("rb") as f:
        return any(f.read(HEADER_SIZE))


def test_rolls_to_files_made_ahead_on_the_maker_thread(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = _record_creations(monkeypatch)
    store = _maker_store(new_store, index_max_entries=32)
    if store is None:
        return
    idx = store.index
    for i in range(60):  # two index entries per record (UNIQ_KEY and KEYS): ~120 entries, 31 a file
        _wait_made(store)
        assert store.put("T", i % 2, keyed(i))[0].status == PutStatus.PUT_OK
    assert len(idx.files) >= 4 and idx.made_on_writer == 0 and idx.made_ahead == len(idx.files)
    assert threads and set(threads) == {"pymq-file-maker"}, threads
    assert all(store.query_by_key("T", f"K{i}") for i in range(60))
    # The next one is queued once the newest file is 90 % full, not earlier.
    assert idx.next is None or idx.files[-1].count >= int(32 * index_next.PREPARE_FRACTION)
    names = [f.mf.path.name for f in idx.files]
    assert names == sorted(names)
    store.halt()  # a crash right after rolls into files made ahead
    again = new_store(index_max_entries=32)
    assert len(again.index.files) == len(names) and all(again.query_by_key("T", f"K{i}") for i in range(60))


def test_the_writer_makes_the_next_file_when_it_is_not_ready(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = _record_creations(monkeypatch)
    store = _maker_store(new_store, index_max_entries=32)
    if store is None:
        return
    _wait_made(store)  # the first file, queued at start
    monkeypatch.setattr(store.map_pool.maker, "submit", lambda mf: None)  # the maker never sees the next ones
    for i in range(40):
        assert store.put("T", 0, keyed(i))[0].status == PutStatus.PUT_OK
    idx = store.index
    assert idx.made_ahead == 1 and idx.made_on_writer == len(idx.files) - 1 >= 2
    assert threads[0] == "pymq-file-maker" and set(threads[1:]) == {threading.current_thread().name}
    assert all(store.query_by_key("T", f"K{i}") for i in range(40))


def test_restart_after_a_crash_drops_a_file_made_ahead_but_unused(new_store: StoreFactory) -> None:
    store = _maker_store(new_store, index_max_entries=32)
    if store is None:
        return
    idx = store.index
    i = 0
    while idx.next is None or len(idx.files) < 2:  # into the second file, past 90 %
        store.put("T", 0, keyed(i))
        i += 1
    _wait_made(store)
    prepared = idx.next.path  # type: ignore[union-attr]
    used = [f.mf.path for f in idx.files]
    store.halt()  # crash: the file made ahead stays, its header never written
    assert prepared.exists() and not _header_written(prepared) and prepared.name > used[-1].name
    with capture_logs() as logs:
        again = new_store(index_max_entries=32)
    dropped = [e for e in logs if e["event"] == "index_file_dropped"]
    assert [(e["path"], e["reason"]) for e in dropped] == [(str(prepared), "header never written")]
    assert [f.mf.path for f in again.index.files] == used
    assert all(again.query_by_key("T", f"K{j}") for j in range(i))
    # Writing goes on: the next roll takes a new file made ahead, named after the used ones.
    for j in range(i, i + 40):
        _wait_made(again)
        assert again.put("T", 0, keyed(j))[0].status == PutStatus.PUT_OK
    names = [f.mf.path.name for f in again.index.files]
    assert names == sorted(names) and len(names) > len(used) and again.index.made_on_writer == 0
    assert all(again.query_by_key("T", f"K{j}") for j in range(i + 40))
    # A clean shutdown deletes the file made ahead: nothing for the next load to drop.
    j = i + 40
    while again.index.next is None:
        again.put("T", 0, keyed(j))
        j += 1
    _wait_made(again)
    leftover = again.index.next.path
    assert leftover.exists()
    again.shutdown()
    assert not leftover.exists()
    with capture_logs() as logs:
        third = new_store(index_max_entries=32)
    assert not [e for e in logs if e["event"] == "index_file_dropped"]
    assert all(third.query_by_key("T", f"K{k}") for k in range(j))
