"""Opening and closing a store's files: recovery at start, the clean shutdown, the crash-like halt.

The facade (:class:`~pymq.broker.store.message_store.MessageStore`) keeps the entry points and
stops the background threads first; what happens to the files is here.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from pymq.broker.store.checkpoint import Checkpoint
from pymq.broker.store.cleanup import disk_ratio
from pymq.broker.store.dir_lock import DirLock, fsync_dir
from pymq.broker.store.queue_table import QueueTable
from pymq.broker.store.recovery import RecoveryReport, recover
from pymq.broker.store.services import StoreServices
from pymq.broker.store.store_view import RecoveryView, ServicesView
from pymq.errors import StoreError
from pymq.logs import get_logger

log = get_logger("broker.store")


class LifecycleView(RecoveryView, ServicesView, Protocol):
    """What opening and closing the files (lifecycle.start / shutdown / halt) uses."""

    logics_lock: threading.Lock
    dir_lock: DirLock
    queue_table: QueueTable
    services: StoreServices
    running: bool
    started_at: float
    recovery: RecoveryReport | None

    def flush_logics_locked(self, index: bool = True) -> None: ...


def start(store: LifecycleView) -> None:
    """Lock the directory, recover (abnormally if the abort file is there), start the threads."""
    store.root.mkdir(parents=True, exist_ok=True)
    store.dir_lock.acquire()
    try:
        abort = store.root / "abort"
        abnormal = abort.exists()
        store.checkpoint = Checkpoint(store.root / "checkpoint")
        store.restored_range = store.queue_table.load(abnormal=abnormal, clean_end=store.checkpoint.clean_end)
        store.index_rolled_back = store.index.load()
        store.recovery = r = recover(store, abnormal=abnormal)
        log.info(
            "store_recovered",
            abnormal=abnormal,
            commitlog_end=r.commitlog_end,
            scanned_mb=round(r.scanned_bytes / 1e6, 2),
            records=r.scanned_records,
            redispatched_cq=r.redispatched_cq,
            repaired_cq=r.repaired_cq,
            redispatched_index=r.redispatched_index,
            rolled_back_index=r.rolled_back_index,
            truncated_bytes=r.truncated_bytes,
            dropped_cq_entries=r.dropped_cq_entries,
            seconds=round(r.seconds, 3),
        )
        store.checkpoint.clean_end = -1
        store.checkpoint.flushed_phys = store.commitlog.max_offset
        store.checkpoint.flush()
        abort.touch()
        fsync_dir(store.root)
        store.running = True
        store.started_at = time.time()
        store.disk_full = disk_ratio(store) > store.config.disk_full_ratio
        store.services.start(max(int(time.time() * 1000), store.last_store_ts))
    except BaseException:
        store.dir_lock.release()
        raise


def shutdown(store: LifecycleView) -> None:
    """Flush everything and mark the shutdown clean (the threads are stopped already)."""
    with store.lock, store.file_lock, store.logics_lock:
        try:
            store.map_pool.settle()  # consume-queue files still being made: now
            clean = True
        except StoreError as exc:
            # Their entries cannot reach disk: shut down as after a crash (the abort file
            # stays, logics_ts does not cover them), so the next start re-dispatches them.
            log.error("consume_queue_files_not_made", reason=str(exc), pending=len(store.map_pool.pending))
            clean = False
        commitlog, checkpoint = store.commitlog, store.checkpoint
        commitlog.flush()
        checkpoint.physic_ts = store.last_store_ts
        store.flush_logics_locked()
        if clean:
            checkpoint.clean_end = commitlog.max_offset
        checkpoint.flushed_phys = commitlog.max_offset
        checkpoint.flush()
        store.index.close()
        if clean:
            store.queue_table.save_ends((commitlog.min_offset, commitlog.max_offset))
        for cq in store.queues.values():
            cq.close()
        commitlog.close()
        checkpoint.close()
    if clean:
        (store.root / "abort").unlink(missing_ok=True)
    fsync_dir(store.root)
    store.dir_lock.release()
    if clean:
        log.info("store_shutdown_clean", commitlog_end=store.checkpoint.clean_end)


def halt(store: LifecycleView) -> None:
    """Unmap everything without a final flush and leave the abort file (the threads are stopped already)."""
    with store.lock, store.file_lock, store.logics_lock:
        store.index.abandon()
        for cq in store.queues.values():
            cq.close()
        store.commitlog.mfq.abandon()
        store.checkpoint.close()
    store.dir_lock.release()
