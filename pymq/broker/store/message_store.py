"""The message store facade: what the broker calls. No sockets and no asyncio in here.

Layout under ``store_dir`` (overview in ``docs/STORE.md``; each format is specified in the
docstring of the module that writes it)::

    commitlog/<20-digit offset>            records of every topic       (commitlog.py, protocol/record.py)
    consumequeue/<topic>/<qid>/<offset>    20-byte entries per queue    (consume_queue.py)
    index/<yyyyMMddHHmmssSSS>              hash index by key            (index.py)
    checkpoint                             flushed store times          (checkpoint.py)
    abort                                  exists while running: its presence at start = crash
    lock                                   flock()ed by the running store (holds its pid)
    config/*.json                          broker state, atomic writes  (config_files.py)

Writes and reads happen on the caller's thread (the broker's event loop) under one lock;
flushing, warming and cleanup run on their own threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

from pymq.broker.store import lifecycle, replica_ops, residency, sync_plan
from pymq.broker.store.appender import Appender, rejected_results
from pymq.broker.store.arrivals import ArrivalListener, ArrivalListeners, TopicFilter
from pymq.broker.store.checkpoint import Checkpoint
from pymq.broker.store.cleanup import run_cleanup
from pymq.broker.store.commitlog import CommitLog
from pymq.broker.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from pymq.broker.store.dir_lock import DirLock
from pymq.broker.store.disk_guard import DiskGuard, WriteRefusal
from pymq.broker.store.dispatcher import Dispatcher, TagsRule
from pymq.broker.store.flush import FlushCallback, flush_logics_pass
from pymq.broker.store.index import IndexService
from pymq.broker.store.queue_table import QueueTable
from pymq.broker.store.reader import find_by_key, get_from_queue, offset_by_time, store_time_at
from pymq.broker.store.recovery import RecoveryReport
from pymq.broker.store.results import GetResult, GetStatus, PutResult, PutResults, PutStatus, StoredRun
from pymq.broker.store.services import StoreServices
from pymq.broker.store.sync_plan import Syncer, SyncPlan
from pymq.config import StoreConfig
from pymq.errors import StoreError
from pymq.logs import get_logger
from pymq.protocol.record import pack_host, record_store_timestamp
from pymq.protocol.record_batch import SplitBatch, count_records

log = get_logger("broker.store")

T = TypeVar("T")


class QueueEntries(NamedTuple):
    """Entries read from a consume queue: the offset of the first, and each (phys, size, tags code)."""

    offset: int
    entries: list[tuple[int, int, int]]


class MessageStore:
    def __init__(self, config: StoreConfig, *, store_host: str = "127.0.0.1:10911") -> None:
        self.config = config
        self.root = Path(config.store_dir)
        host, _, port = store_host.rpartition(":")
        self.store_host = pack_host(host, int(port or 0))
        self.commitlog = CommitLog(self.root / "commitlog", config.commitlog_file_size, pwrite=config.commitlog_pwrite)
        #: which commitlog blocks are in memory (cold pulls are prefaulted off the loop)
        self.residency = residency.Residency(self.commitlog.mfq)
        self.queue_table = QueueTable(self.root, config)
        #: the table's own dict, pool and set (services, metrics and tests read them here)
        self.queues = self.queue_table.queues
        self.map_pool = self.queue_table.map_pool
        self.dirty_queues = self.queue_table.dirty
        #: the commitlog (min, end) the restored queue ends were recorded with (None: none restored)
        self.restored_range: tuple[int, int] | None = None
        self.index = IndexService(self.root / "index", config.index_hash_slots, config.index_max_entries)
        #: builds consume-queue and index entries for every record the commitlog takes
        self.dispatcher = Dispatcher(self.queue_table.queue_for, self.index)
        self.appender = Appender(
            self.commitlog, self.dispatcher, store_host=self.store_host, max_message_size=config.max_message_size
        )
        self.lock = threading.RLock()
        #: held by the commitlog flusher while syncing, and by whoever deletes or closes files
        self.file_lock = threading.Lock()
        #: held by the consume-queue/index flush while syncing, and by whoever deletes or
        #: closes files; separate from file_lock so a slow logics flush (many queues) never
        #: holds up the commitlog flush that SYNC_FLUSH sends wait for
        self.logics_lock = threading.Lock()
        self.appender.file_locks = (self.file_lock, self.logics_lock)
        self.checkpoint: Checkpoint
        self.last_store_ts = 0
        self.running = False
        #: why puts are refused right now (a full disk, a consume-queue file backlog), or None:
        #: the one attribute the put path reads (set through disk_full and set_queue_file_backlog)
        self.refused: str | None = None
        self._refusal = WriteRefusal()
        #: the write path's disk-full check (sets disk_full between cleanup passes)
        self.disk_guard = DiskGuard(self, self.commitlog.mfq)
        self.recovery: RecoveryReport | None = None
        self.index_rolled_back = 0
        self.started_at = 0.0
        self.put_count = 0
        self.put_bytes = 0
        self.get_count = 0
        self.dir_lock = DirLock(self.root)
        #: flushers, cleanup, warmer, syncer and file maker (started after recovery)
        self.services = StoreServices(self)
        #: arrival listeners by topic (see add_arrival_listener)
        self.arrivals = ArrivalListeners()

    # --- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Recover (abnormally after a crash), mark the store running and start its threads."""
        lifecycle.start(self)

    def _stop_services(self) -> bool:
        """Refuse further writes and stop the background threads; False if already stopped."""
        if not self.running:
            return False
        with self.lock:
            self.running = False
        self.services.stop()
        return True

    def shutdown(self) -> None:
        """Flush everything and mark the shutdown clean (removes the abort file)."""
        if self._stop_services():
            lifecycle.shutdown(self)

    def halt(self) -> None:
        """Stop the way a crash would: no final flush, abort file left, files unmapped, lock released.

        The data written so far stays in the page cache, exactly as after ``kill -9``; the
        next :meth:`start` (on a new instance) runs abnormal recovery. For tests and benchmarks.
        """
        if self._stop_services():
            lifecycle.halt(self)

    def settle_queue_files(self) -> int:
        """Make now every consume-queue file still being made on the maker thread; returns how many."""
        with self.lock:
            return self.map_pool.settle()

    def queue_for(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, made (with no file yet) if it does not exist."""
        return self.queue_table.queue_for(topic, queue_id)

    # --- writing --------------------------------------------------------------------------------------------

    def set_tags_rule(self, topic: str, rule: TagsRule) -> None:
        """Let ``rule(properties, store_ts)`` give the tags code of ``topic``'s consume-queue entries
        (a delivery time, for the schedule and timer topics); register before start."""
        self.dispatcher.set_tags_rule(topic, rule)

    @property
    def pending_queue_files(self) -> int:
        """New consume-queue files waiting to be made (their entries buffered in memory)."""
        return len(self.map_pool.pending)

    def add_arrival_listener(self, listener: ArrivalListener, topics: TopicFilter | None = None) -> None:
        """``listener(topic, queue_id, max_offset)`` after messages land in a queue (writer's thread).

        ``topics``: only for topics it accepts (asked once per topic, so it must depend on the
        name only); None: every topic. A put calls just the listeners of its topic.
        """
        self.arrivals.add(listener, topics)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        self.arrivals.remove(listener)

    def start_at(self, offset: int) -> None:
        """Make an empty commitlog begin at file boundary ``offset`` (a new slave of a master whose
        oldest data starts there); the next :meth:`append_raw` must come at ``offset``."""
        replica_ops.start_at(self, offset)

    def split(self, topic: str, data: bytes) -> SplitBatch:
        """Validate ``data`` as a batch for ``topic`` without storing it (the put path validates once,
        lets its hooks look at the records' properties, then hands the split to :meth:`put_batches`)."""
        return self.appender.split(topic, data)

    def put_batches(
        self,
        batches: Sequence[tuple[str, int, bytes | bytearray | memoryview]],
        *,
        atomic: bool = False,
        splits: Sequence[SplitBatch | None] | None = None,
    ) -> list[PutResults]:
        """Append records for several queues in one call: one lock hold and one store time.

        Each ``(topic, queue_id, data)`` gets the queue offsets of its own queue, in order;
        the answer holds one result list per batch, one result per record. If a file cannot
        be created, that batch is undone (``CREATE_MAPPED_FILE_FAILED``); with ``atomic``
        (the pieces of one request, see :class:`pymq.broker.put_path.PutPath`) the batches
        stored before it are undone too and every record gets that status. ``splits``, if
        given, holds :meth:`split` of each batch (None: validate it here).
        """
        if len(batches) == 1:  # one batch: put's steps, without the multi-batch bookkeeping
            topic, queue_id, data = batches[0]
            return [self.put(topic, queue_id, data, splits[0] if splits else None)]
        todo: list[tuple[str, int, bytes]] = [(t, q, d if isinstance(d, bytes) else bytes(d)) for t, q, d in batches]
        refused = self.refused if self.running else "store is not running"
        if refused is not None:
            return [rejected_results(count_records(d), PutStatus.SERVICE_NOT_AVAILABLE, refused) for _, _, d in todo]
        answers: list[PutResults] = []
        arrived: set[tuple[str, int]] = set()
        with self.lock:
            if not self.running:
                return [
                    rejected_results(count_records(d), PutStatus.SERVICE_NOT_AVAILABLE, "store is shutting down")
                    for _, _, d in todo
                ]
            # Store times never go backwards, even if the clock does: recovery and
            # offset_by_time rely on them being ordered like the commitlog.
            store_ts = max(int(time.time() * 1000), self.last_store_ts)
            appender = self.appender
            start_phys = self.commitlog.max_offset if atomic else 0
            #: (topic, queue id, its end before this call) of each batch, to undo an atomic call
            starts: list[tuple[str, int, int]] = []
            stored = stored_bytes = 0
            for i, (topic, queue_id, data) in enumerate(todo):
                if atomic:
                    starts.append((topic, queue_id, self.queue_table.queue_for(topic, queue_id).max_offset))
                try:
                    results = appender.put(topic, queue_id, data, store_ts, splits[i] if splits else None)
                except StoreError as exc:
                    failed, reason = self.disk_guard.append_failed(exc)
                    if atomic:
                        appender.undo(start_phys, starts)
                        answers = [rejected_results(count_records(d), failed, reason) for _, _, d in todo]
                        stored = stored_bytes = 0
                        arrived.clear()
                        break
                    answers.append(rejected_results(count_records(data), failed, reason))
                    continue
                answers.append(results)
                if appender.stored:
                    stored += appender.stored
                    stored_bytes += appender.stored_bytes
                    arrived.add((topic, queue_id))
            self.put_count += stored
            self.put_bytes += stored_bytes
            self.last_store_ts = store_ts
            self.disk_guard.after_put(stored_bytes)
        self.arrivals.notify_queues(arrived, self.queues)
        return answers

    def put(
        self, topic: str, queue_id: int, data: bytes | bytearray | memoryview, split: SplitBatch | None = None
    ) -> PutResults:
        """Append the encoded records in ``data`` to queue ``(topic, queue_id)``; one result per record.

        A record that fails validation gets its own status and the others are stored; if a
        file cannot be created, nothing of the batch stays (``CREATE_MAPPED_FILE_FAILED``).
        ``split``: :meth:`split` of ``data`` if the caller made it (the put path validates once).
        Every put of one batch comes here (a single send is a batch of one); several queues
        at once go through :meth:`put_batches`.
        """
        if not isinstance(data, bytes):
            data = bytes(data)
        refused = self.refused if self.running else "store is not running"
        if refused is not None:
            return rejected_results(count_records(data), PutStatus.SERVICE_NOT_AVAILABLE, refused)
        appender = self.appender
        with self.lock:
            if not self.running:
                return rejected_results(count_records(data), PutStatus.SERVICE_NOT_AVAILABLE, "store is shutting down")
            now = int(time.time() * 1000)
            store_ts = now if now > self.last_store_ts else self.last_store_ts
            results: PutResults
            try:
                results = appender.put(topic, queue_id, data, store_ts, split)
            except StoreError as exc:
                failed, reason = self.disk_guard.append_failed(exc)
                results = rejected_results(count_records(data), failed, reason)
                stored = stored_bytes = 0
            else:
                stored = appender.stored
                stored_bytes = appender.stored_bytes
                if stored:
                    self.put_count += stored
                    self.put_bytes += stored_bytes
            self.last_store_ts = store_ts
            self.disk_guard.after_put(stored_bytes)
        if stored:
            listeners = self.arrivals.by_topic.get(topic)
            if listeners is None:
                listeners = self.arrivals.resolve(topic)
            if listeners:
                # The queue's end after this put: the appender's last offset when all were stored.
                if type(results) is StoredRun:
                    end = results.first_queue_offset + len(results)
                elif len(results) == stored:
                    end = results[-1].queue_offset + 1
                else:
                    end = self.max_offset(topic, queue_id)
                for listener in listeners:
                    listener(topic, queue_id, end)
        return results

    def append_raw(
        self, offset: int, data: bytes | bytearray | memoryview, written: Callable[[int], object] | None = None
    ) -> int:
        """Append bytes in commitlog layout at exactly ``offset`` (a slave's copy of its master's).

        The records are checked (:meth:`CommitLog.append_raw`), written, then dispatched
        by the same dispatcher as the producers' batches. ``written`` is called with the new
        commitlog end between the two: a slave reports its offset there, as RocketMQ's does
        after the commitlog append, so its master's waiters do not wait for the consume queues
        and the index (nothing else runs on the caller's thread before they are built, so no
        reader of this store sees the gap). Returns the new commitlog end;
        raises :class:`StoreError` (nothing written) if the bytes do not continue the commitlog,
        or while puts are refused (a full disk, consume-queue files not being made: replication
        pauses and retries rather than buffer entries without bound).
        """
        with self.lock:
            if not self.running:
                raise StoreError("store is not running")
            if self.refused is not None:
                raise StoreError(f"not storing replicated data: {self.refused}")
            stored = self.commitlog.append_raw(offset, data)
            try:
                if written is not None:
                    written(self.commitlog.max_offset)
            finally:  # whatever ``written`` does, what is written is dispatched
                arrived = self.dispatcher.dispatch_stored(stored)
            for _mf, _delta, records in stored:
                if records:
                    self.put_count += len(records)
                    self.put_bytes += sum([r[1] for r in records])
                    self.last_store_ts = max(self.last_store_ts, records[-1][6])
            end = self.commitlog.max_offset
        self.arrivals.notify_queues(arrived, self.queues)
        return end

    def truncate_to(self, offset: int) -> int:
        """Drop every record from commitlog offset ``offset`` on (a slave's tail its master lacks).

        The commitlog ends at ``offset`` (later files deleted, the rest of the file zeroed),
        consume-queue entries of the dropped records and index entries pointing at them are
        removed, and the next :meth:`append_raw` continues at ``offset``. ``offset`` must be
        a record boundary inside the data (a record, a blank marker or a file starts there, or
        the end); otherwise :class:`StoreError` and nothing changes. Returns the bytes dropped.
        Replication decides when (see :mod:`pymq.broker.ha.epochs`); the store only does it.
        """
        return replica_ops.truncate_to(self, offset)

    @property
    def disk_full(self) -> bool:
        """Writes are refused because the disk is full (set by cleanup and the disk guard)."""
        return self._refusal.disk_full

    @disk_full.setter
    def disk_full(self, full: bool) -> None:
        self.refused = self._refusal.set_disk_full(full)

    @property
    def queue_file_backlog(self) -> str | None:
        """Why puts are refused because consume-queue files are not being made (None: they are not)."""
        return self._refusal.backlog

    def set_queue_file_backlog(self, reason: str | None) -> None:
        """The file maker's backlog passed its limits (``reason``) or came back under them (None)."""
        self.refused = self._refusal.set_backlog(reason)

    def request_flush(self, offset: int, callback: FlushCallback) -> None:
        """``callback(True)`` from the flush thread once the commitlog below ``offset`` is on disk."""
        flusher = self.services.flusher
        if flusher is None:
            callback(False)
            return
        flusher.request(offset, callback)

    @property
    def syncer(self) -> Syncer | None:
        """SYNC_FLUSH with the C accelerator: the thread the syncs senders wait for run on (see sync_plan)."""
        return self.services.syncer

    def sync_plan(self, upto: int) -> SyncPlan | None:
        """A sync for :attr:`syncer` making the commitlog below ``upto`` durable (see :func:`sync_plan.plan_for`)."""
        return sync_plan.plan_for(self, upto)

    def sync_done(self, plan: SyncPlan, ok: bool, *, blocking: bool = True) -> bool:
        """Finish a plan the syncer reported (see :func:`sync_plan.finish`); False: retry later."""
        return sync_plan.finish(self, plan, ok, blocking=blocking)

    def flush_logics(self, *, index: bool = True, settle: bool = True) -> None:
        """Sync consume queues (and index files unless ``index`` is False), then the checkpoint.

        ``settle``: first make the consume-queue files still being made, on this thread under
        the store lock (the periodic flush passes False: it leaves them to the maker thread and
        syncs them next time).
        """
        if settle:
            self.settle_queue_files()
        with self.logics_lock:
            self.flush_logics_locked(index)

    def flush_logics_locked(self, index: bool = True) -> None:
        """One consume-queue (and index) flush pass; the caller holds ``logics_lock``."""
        flush_logics_pass(self.dirty_queues, self.index if index else None, self.checkpoint, self.last_store_ts)

    # --- reading --------------------------------------------------------------------------------------------

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = 4 * 1024 * 1024,
        tag_codes: frozenset[int] | set[int] | None = None,
    ) -> GetResult:
        """Read up to ``max_count`` records from a queue starting at ``offset``, as buffer slices."""
        with self.lock:
            self.get_count += 1
            return get_from_queue(
                self.commitlog, self.queues.get((topic, queue_id)), offset, max_count, max_bytes, tag_codes
            )

    def pages_missing(self, got: GetResult) -> bool:
        """Whether some commitlog pages of a read are not in memory: then :meth:`prefault` it off the loop.

        Only reads ending more than ``residency.COLD_LAG`` behind the commitlog end are looked
        at (the tail was just written); for those, one dict lookup, and a ``mincore`` per MiB
        not checked in the last seconds (see :mod:`pymq.broker.store.residency`).
        """
        return bool(got.buffers) and self.residency.missing(
            got.min_physical_offset_read, got.max_physical_offset_read, self.commitlog.max_offset
        )

    def prefault(self, got: GetResult) -> None:
        """Bring a read's commitlog pages into memory and map them (any thread, no lock: blocks on the disk)."""
        self.residency.prefault(got.min_physical_offset_read, got.max_physical_offset_read)

    def prefault_after(self, got: GetResult) -> None:
        """Like :meth:`prefault`, for the next MiBs after a read (run it while the read is answered)."""
        self.residency.prefault_after(got.max_physical_offset_read)

    def read_commitlog(self, offset: int, size: int) -> list[memoryview]:
        """Up to ``size`` commitlog bytes from ``offset``, one view per file (what replication ships)."""
        with self.lock:
            return self.commitlog.read(offset, size)

    def read_record(self, phys: int) -> memoryview | None:
        """The record stored at commitlog offset ``phys`` (view by message id)."""
        with self.lock:
            return self.commitlog.read_record(phys)

    def map_records(self, phys: Sequence[int], fn: Callable[[memoryview], T]) -> list[T | None]:
        """``fn`` of each record stored at the commitlog offsets ``phys`` (None where none is), under one
        lock hold: ``fn`` must not keep the view (copy with ``bytes``, or read what it needs)."""
        with self.lock:
            read = self.commitlog.read_record
            return [None if (view := read(p)) is None else fn(view) for p in phys]

    def read_queue_entries(self, topic: str, queue_id: int, offset: int, max_entries: int) -> QueueEntries:
        """Up to ``max_entries`` consume-queue entries from ``offset`` (moved up to the queue's first kept
        entry), decoded: what a broker service reading a queue of its own needs (the timer's)."""
        with self.lock:
            cq = self.queues.get((topic, queue_id))
            if cq is None:
                return QueueEntries(offset, [])
            offset = max(offset, cq.min_offset)
            raw = cq.read_entries(offset, max_entries)
            return QueueEntries(offset, [CQ_ENTRY.unpack_from(raw, at) for at in range(0, len(raw), CQ_ENTRY_SIZE)])

    def query_by_key(
        self, topic: str, key: str, max_count: int = 32, begin_ts: int = 0, end_ts: int | None = None
    ) -> list[memoryview]:
        """Records of ``topic`` with ``key`` (business key or unique id) in a time range, newest first."""
        with self.lock:
            return find_by_key(self.index, self.commitlog, topic, key, max_count, begin_ts, end_ts)

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose record was stored at or after ``timestamp`` (max offset if none)."""
        with self.lock:
            cq = self.queues.get((topic, queue_id))
            return offset_by_time(cq, self.commitlog, timestamp) if cq is not None else 0

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the record at a queue offset (0 if gone)."""
        with self.lock:
            cq = self.queues.get((topic, queue_id))
            return store_time_at(cq, self.commitlog, offset) if cq is not None else 0

    def physical_offset_at(self, topic: str, queue_id: int, offset: int) -> int | None:
        """The commitlog offset the queue's entry at ``offset`` points to (None if there is none)."""
        with self.lock:
            cq = self.queues.get((topic, queue_id))
            e = cq.entry(offset) if cq is not None and cq.min_offset <= offset < cq.max_offset else None
            return e[0] if e is not None else None

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(qid for (t, qid) in self.queues if t == topic)

    def delete_topic(self, topic: str) -> None:
        with self.lock, self.file_lock, self.logics_lock:
            for key in [k for k in self.queues if k[0] == topic]:
                self.queues.pop(key).destroy()
            self.arrivals.forget(topic)

    # --- cleanup --------------------------------------------------------------------------------------------

    def delete_commitlog_files(self, count: int) -> int:
        with self.lock, self.file_lock, self.logics_lock:
            count = min(count, len(self.commitlog.mfq.files) - 1)
            if count <= 0:
                return 0
            self.commitlog.mfq.delete_first(count)
            return count

    def delete_orphaned_logics(self) -> tuple[int, int]:
        with self.lock, self.file_lock, self.logics_lock:
            min_phys = self.commitlog.min_offset
            cq_deleted = sum(cq.delete_expired(min_phys) for cq in self.queues.values())
            idx_deleted = self.index.delete_below(min_phys)
            return cq_deleted, idx_deleted

    def run_cleanup(self, now: float | None = None):  # type: ignore[no-untyped-def]
        """One cleanup pass now (the cleanup thread runs this every ``cleanup_interval_ms``)."""
        return run_cleanup(self, now)

    def disk_bytes(self) -> int:
        return (
            self.commitlog.mfq.disk_bytes()
            + sum(cq.mfq.disk_bytes() for cq in list(self.queues.values()))
            + self.index.disk_bytes()
        )

    def disk_ratio(self) -> float:
        """Disk use now, without waiting for a file being allocated (then: the last figure measured).

        For the event loop (runtime info) and metrics; cleanup measures with :func:`disk_ratio`.
        """
        return self.disk_guard.measure()

    @property
    def flushed_offset(self) -> int:
        return self.commitlog.mfq.flushed_offset

    @property
    def min_phy_offset(self) -> int:
        """The commitlog's first kept byte (RocketMQ's getMinPhyOffset)."""
        return self.commitlog.min_offset

    @property
    def max_phy_offset(self) -> int:
        """The commitlog's end: where the next record goes (RocketMQ's getMaxPhyOffset)."""
        return self.commitlog.max_offset

    @property
    def commitlog_file_size(self) -> int:
        return self.commitlog.file_size

    @property
    def max_message_size(self) -> int:
        """The largest record the store takes (put hooks that rewrite a record check against it)."""
        return self.appender.max_message_size

    def earliest_store_time(self) -> int:
        with self.lock:
            mf = self.commitlog.mfq.files[0] if self.commitlog.mfq.files else None
            if mf is None or mf.wrote_pos == 0:
                return 0
            return record_store_timestamp(mf.mm, 0)


__all__ = ["CQ_ENTRY_SIZE", "GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus", "QueueEntries"]
