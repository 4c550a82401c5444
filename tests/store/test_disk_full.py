"""Disk full (simulated capacity): writes refused with SERVICE_NOT_AVAILABLE, accepted again after cleanup."""

from __future__ import annotations

import logging
import time

import pytest

from pymq.broker.store import GetStatus, PutStatus
from pymq.logs import event_fields
from tests.store.conftest import StoreFactory
from tests.store.storeutil import keyed, read_queue
from tests.store.test_cleanup import fill, other_hour, quiet


def logged(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    """The pymq events captured since the last ``caplog.clear()``, each with its level."""
    return [{**(event_fields(r) or {}), "level": r.levelname.lower()} for r in caplog.records]


def test_store_restarted_on_a_full_disk_refuses_writes_until_cleanup(
    new_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Over 90 % at start: sends are SERVICE_NOT_AVAILABLE; one cleanup pass frees space and sends work."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now)))
    results = fill(store, 10)
    used = store.disk_bytes()
    store.shutdown()
    store = quiet(new_store(delete_when=other_hour(now), simulated_disk_capacity=int(used / 0.93)))
    assert store.disk_full
    refused = store.put_messages("T", 0, keyed(1000) + keyed(1001))
    assert [r.status for r in refused] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
    assert refused[0].reason == "disk full: writes refused until cleanup"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pymq"):
        report = store.run_cleanup(now=now)
    logs = logged(caplog)
    assert report.deleted_commitlog_files >= 1 and report.disk_ratio < 0.85 and not store.disk_full
    assert any(e["event"] == "disk_space_recovered_writes_accepted" for e in logs)
    ok = store.put_messages("T", 0, keyed(1002))[0]
    assert ok.status == PutStatus.PUT_OK
    kept = [r for r in results if r.physical_offset >= store.commitlog.min_offset and r.queue_id == 0]
    assert [r.physical_offset for r in read_queue(store, "T", 0, store.min_offset("T", 0))] == [
        r.physical_offset for r in kept
    ] + [ok.physical_offset]


def test_disk_filling_while_running_refuses_then_accepts(
    new_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Another tenant fills the disk: with forced deletion off the store reports full and refuses writes
    (logging why); once forced deletion is allowed again, the next pass frees space and writes resume."""
    now = time.time()
    store = quiet(new_store(delete_when=other_hour(now), disk_clean_forcibly_ratio=1.0))
    fill(store, 6)
    assert store.put_messages("T", 1, keyed(5000))[0].status == PutStatus.PUT_OK
    store.config.simulated_disk_capacity = int(store.disk_bytes() / 0.92)  # the disk shrinks under us
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pymq"):
        report = store.run_cleanup(now=now)
    logs = logged(caplog)
    assert report.deleted_commitlog_files == 0 and store.disk_full
    full = [e for e in logs if e["event"] == "disk_full_writes_refused"]
    assert full and full[0]["level"] == "error" and full[0]["disk_ratio"] >= 0.9
    assert store.put_messages("T", 1, keyed(5001))[0].status == PutStatus.SERVICE_NOT_AVAILABLE
    assert store.get_messages("g", "T", 1, 0).status == GetStatus.FOUND  # reads still work
    store.config.disk_clean_forcibly_ratio = 0.85
    report = store.run_cleanup(now=now)
    assert report.deleted_commitlog_files >= 1 and not store.disk_full
    res = store.put_messages("T", 1, keyed(5002))[0]
    assert res.status == PutStatus.PUT_OK and res.queue_offset == store.max_offset("T", 1) - 1
    assert store.get_messages("g", "T", 1, 0).status == GetStatus.OFFSET_TOO_SMALL
