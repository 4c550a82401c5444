"""What the store's flush threads, cleanup and recovery see of the store: small protocols.

:class:`~pymq.broker.store.message_store.MessageStore` starts those services and hands
itself over; they depend on these narrow views instead of on the facade, so the facade
imports them and nothing imports the facade back (no import circle). Each view lists only
what its service touches.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pymq.broker.store.checkpoint import Checkpoint
    from pymq.broker.store.commitlog import CommitLog
    from pymq.broker.store.consume_queue import ConsumeQueue
    from pymq.broker.store.dispatcher import Dispatcher
    from pymq.broker.store.index import IndexService
    from pymq.broker.store.map_pool import MapPool
    from pymq.config import StoreConfig


class StoreCore(Protocol):
    """The parts every service reads: config, files, checkpoint, the newest store time."""

    config: StoreConfig
    root: Path
    commitlog: CommitLog
    checkpoint: Checkpoint
    #: held while syncing the commitlog, and by whoever deletes or closes its files
    file_lock: threading.Lock
    last_store_ts: int


class FlushView(StoreCore, Protocol):
    """What the flush threads and the warmer use."""

    def flush_logics(self, *, index: bool = True, settle: bool = True) -> None: ...


class DiskView(Protocol):
    """What measuring disk use needs."""

    config: StoreConfig
    root: Path

    def disk_bytes(self) -> int: ...


class GuardedView(DiskView, Protocol):
    """What the write path's disk guard (disk_guard.DiskGuard) uses: it measures and sets ``disk_full``."""

    disk_full: bool


class CleanupView(StoreCore, DiskView, Protocol):
    """What the cleanup pass uses."""

    disk_full: bool

    def delete_commitlog_files(self, count: int) -> int: ...

    def delete_orphaned_logics(self) -> tuple[int, int]: ...


class RecoveryView(StoreCore, Protocol):
    """What recovery uses: the queues, the index and the dispatcher, to rebuild entries."""

    queues: dict[tuple[str, int], ConsumeQueue]
    index: IndexService
    dispatcher: Dispatcher
    index_rolled_back: int
    #: the commitlog (min, end) restored queue ends were recorded with (None: none restored)
    restored_range: tuple[int, int] | None

    def queue_for(self, topic: str, queue_id: int) -> ConsumeQueue: ...


class SyncView(StoreCore, Protocol):
    """What SYNC_FLUSH's plans use (sync_plan.plan_for / finish): the store lock, whether it runs."""

    lock: threading.RLock
    running: bool


class ServicesView(FlushView, CleanupView, Protocol):
    """What starting the store's threads uses (services.StoreServices): theirs, plus the file maker's."""

    lock: threading.RLock
    map_pool: MapPool
    index: IndexService

    def set_queue_file_backlog(self, reason: str | None) -> None: ...


class ReplicaView(StoreCore, Protocol):
    """What replication's start_at and truncate_to (replica_ops) use: all three locks, the queues, the index."""

    lock: threading.RLock
    logics_lock: threading.Lock
    queues: dict[tuple[str, int], ConsumeQueue]
    index: IndexService

    @property
    def disk_guard(self) -> DiskRecheck: ...


class DiskRecheck(Protocol):
    """The disk guard, as replication's truncate_to sees it: files went, measure at the next write."""

    def recheck(self) -> None: ...
