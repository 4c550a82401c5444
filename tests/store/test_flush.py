"""Flushing: SYNC_FLUSH group commit, ASYNC_FLUSH progress, the checkpoint, and JSON config files."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from pymq.broker.store.config_files import read_json, write_json_atomic
from pymq.config import FlushDiskType
from tests.helpers import CheckedThread, wait_until_sync
from tests.store.conftest import StoreFactory
from tests.store.storeutil import keyed


def test_sync_flush_acknowledges_after_the_data_is_synced(new_store: StoreFactory) -> None:
    """SYNC_FLUSH: callback(True) comes once the flushed offset covers the request; requests share syncs."""
    store = new_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    answers: list[tuple[int, bool, int]] = []
    done = threading.Event()
    ends = []
    for i in range(50):
        r = store.put("T", 0, keyed(i))[0]
        end = r.physical_offset + r.size
        ends.append(end)

        def cb(ok: bool, end: int = end) -> None:
            answers.append((end, ok, store.flushed_offset))
            if len(answers) == 50:
                done.set()

        store.request_flush(end, cb)
    assert done.wait(10)
    assert sorted(a[0] for a in answers) == ends
    assert all(ok and flushed >= end for end, ok, flushed in answers)
    assert store.services.flusher is not None and store.services.flusher.flush_count <= 50


def test_flush_requests_that_cannot_be_met_are_refused(new_store: StoreFactory) -> None:
    """A request past the end of the commitlog, or after shutdown, is answered False (never left hanging)."""
    store = new_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store.put("T", 0, keyed(1))
    got: list[bool] = []
    done = threading.Event()
    store.request_flush(10**9, lambda ok: (got.append(ok), done.set()))
    assert done.wait(10) and got == [False]
    store.shutdown()
    store.request_flush(1, got.append)
    assert got == [False, False]


def test_async_flush_catches_up_on_its_own(new_store: StoreFactory) -> None:
    """ASYNC_FLUSH: the background flush reaches the end of what was written without being asked."""
    store = new_store(flush_interval_ms=20, flush_least_pages=0)
    store.put("T", 0, b"".join(keyed(i, size=2000) for i in range(20)))
    end = store.commitlog.max_offset
    wait_until_sync(lambda: store.flushed_offset >= end, timeout=5, what="async flush")
    assert store.checkpoint.flushed_phys >= end


def test_flush_logics_records_times_in_the_checkpoint(new_store: StoreFactory) -> None:
    """flush_logics syncs queues and index and records their store times in the checkpoint."""
    store = new_store()
    res = store.put("T", 0, keyed(1) + keyed(2))
    store.flush_logics()
    assert store.checkpoint.logics_ts == store.checkpoint.index_ts == res[-1].store_timestamp


def test_config_json_is_written_atomically_with_a_backup(tmp_path: Path) -> None:
    """Config files are standard JSON, replaced atomically, and the previous version is kept as .bak."""
    path = tmp_path / "config" / "consumerOffset.json"
    write_json_atomic(path, {"offsetTable": {"T@g": {0: 5}}})
    assert json.loads(path.read_text()) == {"offsetTable": {"T@g": {"0": 5}}}
    write_json_atomic(path, {"offsetTable": {"T@g": {0: 9}}})
    assert json.loads(path.with_name("consumerOffset.json.bak").read_text())["offsetTable"]["T@g"]["0"] == 5
    assert read_json(path) == {"offsetTable": {"T@g": {"0": 9}}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["consumerOffset.json", "consumerOffset.json.bak"]


def test_config_json_falls_back_to_the_backup(tmp_path: Path) -> None:
    """A corrupt or missing file loads from .bak; with neither, read_json returns None."""
    path = tmp_path / "topics.json"
    assert read_json(path) is None
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    path.write_text('{"v": 2, "trunc')  # torn by something other than us
    assert read_json(path) == {"v": 1}
    path.unlink()
    assert read_json(path) == {"v": 1}


def test_config_json_concurrent_writers_never_mix(tmp_path: Path) -> None:
    """Threads saving the same file each use their own temp file: the result is one complete version."""
    path = tmp_path / "delayOffset.json"
    payloads = [{"offsetTable": {str(i): i * 1000, "pad": "x" * 5000}} for i in range(8)]
    threads = [CheckedThread(write_json_atomic, path, p) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.result()  # every save succeeded (an error in one is not "one complete version")
    assert json.loads(path.read_text()) in [json.loads(json.dumps(p)) for p in payloads]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
