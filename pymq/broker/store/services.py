"""The store's background threads, started and stopped together.

* :class:`~pymq.broker.store.flush.CommitLogFlusher`: periodic commitlog syncs, and SYNC_FLUSH's
  group commit without the accelerator;
* the C :class:`~pymq.broker.store.sync_plan.Syncer` (SYNC_FLUSH with the accelerator: the
  broker's loop hands it the syncs senders wait for, see :mod:`pymq.broker.sync_flush.loop_sync`);
* :class:`~pymq.broker.store.flush.LogicsFlusher`: consume queues, index, checkpoint;
* :class:`~pymq.broker.store.cleanup.CleanupService`: retention and the disk-full check;
* :class:`~pymq.broker.store.flush.Warmer`: prefaults the commitlog ahead of the writer;
* the map pool's file maker (new consume-queue files, and the next index file, off the writer).

Started once recovery is done (:meth:`StoreServices.start`), stopped before the final flush
(:meth:`StoreServices.stop`), so nothing writes or syncs behind the store's back while it
shuts down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.broker.store.cleanup import CleanupService
from pymq.broker.store.flush import CommitLogFlusher, LogicsFlusher, Warmer
from pymq.broker.store.sync_plan import Syncer, new_syncer
from pymq.config import FlushDiskType

if TYPE_CHECKING:
    from pymq.broker.store.store_view import ServicesView


class StoreServices:
    """Creates, starts and stops the store's threads (see the module docstring)."""

    def __init__(self, store: ServicesView) -> None:
        self.store = store
        self.flusher: CommitLogFlusher | None = None
        self.logics_flusher: LogicsFlusher | None = None
        self.cleaner: CleanupService | None = None
        self.warmer: Warmer | None = None
        #: SYNC_FLUSH with the C accelerator: syncs for waiting sends run on its thread (see sync_plan)
        self.syncer: Syncer | None = None

    def start(self, now_ms: int) -> None:
        """Create and start every thread; ``now_ms``: the store's clock now (names the first index file made ahead)."""
        store = self.store
        config = store.config
        sync = config.flush_disk_type == FlushDiskType.SYNC_FLUSH
        self.flusher = CommitLogFlusher(store, sync=sync)
        self.syncer = new_syncer() if sync else None
        self.logics_flusher = LogicsFlusher(store)
        self.cleaner = CleanupService(store)
        mfq = store.commitlog.mfq
        last = mfq.last
        if last is None:
            # Create the first file now, so the warmer can get ahead of the first writes.
            mfq.create_file(0)
        elif last.warm_lock is None:
            last.enable_warming(last.wrote_pos)
        self.warmer = Warmer(store)
        self.warmer.start()
        # New consume-queue files from now on are made on a thread (recovery made its own).
        store.map_pool.start_maker(
            store.lock,
            max_files=config.consume_queue_max_pending_files,
            max_bytes=config.consume_queue_max_pending_bytes,
            on_backlog=store.set_queue_file_backlog,
        )
        if store.map_pool.maker is not None:
            # Index files too: the next one is made ahead, off the writer's thread (index_next).
            store.index.make_ahead(store.map_pool.maker, now_ms)
        self.flusher.start()
        self.logics_flusher.start()
        self.cleaner.start()

    def stop(self) -> None:
        """Stop every thread (the syncer's queued jobs finish first)."""
        if self.syncer is not None:
            # close joins the thread; the jobs' plans keep their mappings mapped until whoever
            # takes them (the broker's loop_sync) releases them.
            self.syncer.close()
        self.store.map_pool.stop_maker()
        for svc in (self.warmer, self.cleaner, self.logics_flusher, self.flusher):
            if svc is not None:
                svc.stop()
