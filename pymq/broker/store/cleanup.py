"""Deleting old data: expired commitlog files, and everything that pointed into them.

Every pass measures how full the store's disk is, then (every ratio means strictly *above*):

* at one of the ``delete_when`` hours, or when use is above ``disk_max_used_ratio`` (75 %),
  commitlog files older than ``file_reserved_hours`` (72 h) are deleted;
* above ``disk_clean_forcibly_ratio`` (85 %) the oldest files go even if not expired,
  one at a time until use is no longer above it (at most ``MAX_FORCED_DELETES`` per pass),
  unless ``clean_file_forcibly_enable`` is off or the ratio is 1.0: then unexpired data is
  never deleted, and a full disk only refuses writes;
* above ``disk_full_ratio`` (90 %) the store refuses writes until a pass finds it no
  longer above (the write path also checks, see :mod:`pymq.broker.store.disk_guard`).

The newest commitlog file is never deleted. Consume-queue and index files whose records
are all gone follow, and min offsets move forward.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pymq.broker.store.mapped_file import ALLOCATION_LOCK
from pymq.logs import get_logger

if TYPE_CHECKING:
    from pymq.broker.store.store_view import CleanupView, DiskView
    from pymq.config import StoreConfig

log = get_logger("broker.store.cleanup")

#: Unexpired files deleted per pass at most: a file a reader still maps frees its space only
#: when the reader lets go, so "until below the ratio" must not mean "everything".
MAX_FORCED_DELETES = 10


@dataclass
class CleanupReport:
    disk_ratio: float
    deleted_commitlog_files: int = 0
    deleted_cq_files: int = 0
    deleted_index_files: int = 0


def disk_ratio(store: DiskView) -> float:
    """How full the store's disk is (0..1; above 1 only with a simulated capacity)."""
    capacity = store.config.simulated_disk_capacity
    if capacity is not None:
        return store.disk_bytes() / capacity
    with ALLOCATION_LOCK:  # never in the middle of a (failing) preallocation: see ALLOCATION_LOCK
        st = os.statvfs(store.root)
    return _used_ratio(st)


def try_disk_ratio(store: DiskView) -> float | None:
    """:func:`disk_ratio`, or None at once if a file is being allocated (for the write path)."""
    capacity = store.config.simulated_disk_capacity
    if capacity is not None:
        return store.disk_bytes() / capacity
    if not ALLOCATION_LOCK.acquire(blocking=False):
        return None
    try:
        st = os.statvfs(store.root)
    finally:
        ALLOCATION_LOCK.release()
    return _used_ratio(st)


def _used_ratio(st: os.statvfs_result) -> float:
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    avail = st.f_bavail * st.f_frsize
    total = used + avail
    return used / total if total else 0.0


def forced_deletion_allowed(cfg: StoreConfig) -> bool:
    """May unexpired files be deleted to free space? Off, or a ratio of 1.0, means never."""
    return cfg.clean_file_forcibly_enable and cfg.disk_clean_forcibly_ratio < 1.0


def run_cleanup(store: CleanupView, now: float | None = None) -> CleanupReport:
    cfg = store.config
    now = time.time() if now is None else now
    ratio = disk_ratio(store)
    report = CleanupReport(ratio)
    hour = time.localtime(now).tm_hour
    time_to_delete = hour in cfg.delete_hours
    pressure = ratio > cfg.disk_max_used_ratio
    deadline = now - cfg.file_reserved_hours * 3600
    files = store.commitlog.mfq.files
    if time_to_delete or pressure:
        expired = 0
        for mf in files[:-1]:
            if mf.mtime() < deadline:
                expired += 1
            else:
                break
        if expired:
            report.deleted_commitlog_files += store.delete_commitlog_files(expired)
            log.info("expired_commitlog_files_deleted", count=expired, disk_ratio=round(ratio, 3))
    forced = 0
    while (
        forced < MAX_FORCED_DELETES
        and forced_deletion_allowed(cfg)
        and disk_ratio(store) > cfg.disk_clean_forcibly_ratio
        and store.delete_commitlog_files(1)
    ):
        forced += 1
        report.deleted_commitlog_files += 1
        log.warning("commitlog_file_deleted_forcibly", disk_ratio=round(disk_ratio(store), 3))
    if report.deleted_commitlog_files:
        cq, idx = store.delete_orphaned_logics()
        report.deleted_cq_files += cq
        report.deleted_index_files += idx
    ratio = disk_ratio(store)
    full = ratio > cfg.disk_full_ratio
    if full != store.disk_full:
        store.disk_full = full
        if full:
            log.error("disk_full_writes_refused", disk_ratio=round(ratio, 3), limit=cfg.disk_full_ratio)
        else:
            log.warning("disk_space_recovered_writes_accepted", disk_ratio=round(ratio, 3))
    report.disk_ratio = ratio
    return report


class CleanupService(threading.Thread):
    def __init__(self, store: CleanupView) -> None:
        super().__init__(name="pymq-cleanup", daemon=True)
        self.store = store
        self.interval = store.config.cleanup_interval_ms / 1000
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            try:
                run_cleanup(self.store)
            except Exception:
                log.exception("cleanup_failed")

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)
