"""SYNC_FLUSH syncs run by the C :class:`~pymq._speedups.Syncer`: what one covers, and recording it once done.

The broker's loop plans a sync (:func:`plan`, through :meth:`MessageStore.sync_plan`), hands
the plan's raw ``(address, length)`` ranges to the syncer's thread (which msyncs them without
the GIL) and, once the thread reports the job, records it (:func:`record`, through
:meth:`MessageStore.sync_done`): the same bookkeeping as the flusher thread's
``CommitLogFlusher._flush_once`` (the files' flushed positions, then ``physic_ts`` and
``flushed_phys`` in the checkpoint), under the same file lock.

Lifetime: the thread works on raw addresses, so a mapping must not go away while a job on it
runs. A plan holds a buffer export (a ``memoryview``) of every mapping it covers until it is
released; while one exists, ``mmap.close`` raises BufferError, which :meth:`MappedFile.close`
already tolerates (a pull response may hold a view the same way): the descriptor closes, the
mapping stays, and :meth:`SyncPlan.release` unmaps it once the job is over. The syncer keeps
its job's token (the plan) alive until ``take()`` returns it (and joins its thread before it
goes), so closing, deleting (cleanup) or truncating a file (HA, a failed put's undo), or
shutting the store down with a job in flight never unmaps memory under the thread.
Deleting unlinks the path of a file still mapped (the sync then writes to an unlinked inode);
truncating zeroes a tail the job may also sync: both harmless. A truncation since the plan
was made keeps it from moving flushed positions (see :func:`record`).

Flushed positions only move forward (:meth:`MappedFile.mark_flushed`): the flusher thread still
runs its periodic flushes and may have gone past a plan by the time it is recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pymq.broker.store.mapped_file import ranged_msync_available
from pymq.errors import StoreError
from pymq.protocol import record as _record

if TYPE_CHECKING:
    from pymq.broker.store.checkpoint import Checkpoint
    from pymq.broker.store.mapped_file import MappedFile
    from pymq.broker.store.mapped_file_queue import MappedFileQueue
    from pymq.broker.store.store_view import SyncView


class Syncer(Protocol):
    """What the store and the broker use of ``pymq._speedups.Syncer`` (only pymq.protocol.accelerator imports it)."""

    def submit(self, token: object, ranges: Sequence[tuple[int, int]]) -> None: ...
    def take(self) -> list[tuple[Any, int]]: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


class SyncPlan:
    """One sync of the commitlog: the ranges to msync and what to record once they are on disk."""

    __slots__ = ("end", "files", "pins", "ranges", "store_ts", "truncations")

    def __init__(self, store_ts: int, truncations: int) -> None:
        #: ``(address, length)`` of each range to sync, page aligned (one per file)
        self.ranges: list[tuple[int, int]] = []
        #: ``(file, position)``: each file is durable up to ``position`` once the ranges are synced
        self.files: list[tuple[MappedFile, int]] = []
        #: buffer exports keeping the mappings mapped until :meth:`release`
        self.pins: list[memoryview] = []
        #: the store time of the newest record written when the plan was made (all of it is covered)
        self.store_ts = store_ts
        #: the commitlog's truncation count when the plan was made
        self.truncations = truncations
        #: the commitlog offset the plan makes durable
        self.end = 0

    def release(self) -> None:
        """Drop the exports (the syncer's job is over) and unmap files closed meanwhile. Idempotent."""
        if not self.pins:
            return
        for view in self.pins:
            view.release()
        self.pins.clear()
        for mf, _ in self.files:
            if mf.closed:
                # Its close found the mapping exported (BufferError) and left it mapped.
                with contextlib.suppress(BufferError):  # (another plan still holds it)
                    mf.mm.close()

    def __repr__(self) -> str:
        return f"<SyncPlan to {self.end}, {len(self.ranges)} ranges>"


def plan(mfq: MappedFileQueue, store_ts: int) -> SyncPlan | None:
    """A plan syncing everything written to ``mfq`` and not flushed yet; None if there is nothing.

    The caller holds the store lock (no file is closed or deleted meanwhile; the flusher thread
    may flush concurrently, which only makes the plan sync a little more than needed).
    """
    p = SyncPlan(store_ts, mfq.truncations)
    # From the end, back to the last file synced to its end: files are synced in order (this
    # plan, MappedFileQueue.flush; a truncation only cuts the tail), so nothing before it is dirty.
    for mf in reversed(mfq.files):
        dirty = mf.dirty_range()
        if dirty is None:
            if mf.flushed_pos >= mf.size:
                break
            continue
        if not mf.address:
            raise StoreError(f"{mf.path} has no mapping address to sync by (no ctypes msync here)")
        start, end = dirty
        p.pins.append(memoryview(mf.mm))
        p.ranges.append((mf.address + start, end - start))
        p.files.append((mf, end))
        if not p.end:
            p.end = mf.file_from + end
    if not p.files:
        return None
    p.ranges.reverse()  # (in file order: the syncer syncs them in this order)
    p.files.reverse()
    return p


def record(p: SyncPlan, mfq: MappedFileQueue, checkpoint: Checkpoint) -> None:
    """Record a synced plan: files' flushed positions, the checkpoint (the caller holds the file lock).

    After a truncation since the plan was made nothing is recorded: data written past the
    truncation point since then may sit where the plan synced, and the flusher thread's next
    pass records the truth.
    """
    if p.truncations != mfq.truncations:
        return
    for mf, pos in p.files:
        if not mf.closed:
            mf.mark_flushed(pos)
    if p.store_ts > checkpoint.physic_ts:
        checkpoint.physic_ts = p.store_ts
    checkpoint.flushed_phys = mfq.flushed_offset


def new_syncer() -> Syncer | None:
    """The C accelerator's Syncer, where it is built (and not switched off) and msync goes by address."""
    speedups = _record.speedups
    cls = getattr(speedups, "Syncer", None) if speedups is not None else None
    if cls is None or not ranged_msync_available():
        return None
    syncer: Syncer = cls()
    return syncer


def plan_for(store: SyncView, upto: int) -> SyncPlan | None:
    """A plan making the store's commitlog below ``upto`` durable; None if it is already.

    The plan covers everything written and not flushed yet (so its store time covers all of
    it, as the flusher's syncs do). Submit ``plan.ranges`` with the plan as the token, then
    :func:`finish`. StoreError if the store is not running. None with ``upto`` past the end
    too: check the store's ``flushed_offset``.
    """
    with store.lock:
        if not store.running:
            raise StoreError("store is not running")
        mfq = store.commitlog.mfq
        if mfq.flushed_offset >= upto:
            return None
        return plan(mfq, store.last_store_ts)


def finish(store: SyncView, p: SyncPlan, ok: bool, *, blocking: bool = True) -> bool:
    """Finish a plan the syncer reported (``ok``: synced): release its mappings and, if synced,
    :func:`record` it as the flusher thread records its own syncs, under the file lock.

    ``blocking=False`` (the event loop): False if the flusher thread holds the lock (it is
    syncing); call again later. Recording late is harmless: the data is on disk already, the
    checkpoint only claims less meanwhile.
    """
    p.release()
    if not ok or not store.running:
        return True  # (a shutdown flushes everything itself)
    if not store.file_lock.acquire(blocking=blocking):
        return False
    try:
        record(p, store.commitlog.mfq, store.checkpoint)
    finally:
        store.file_lock.release()
    return True
