"""What replication needs of the store besides :meth:`MessageStore.append_raw`: move an empty store's
start to a master's first file (:func:`start_at`) and drop a tail the master lacks (:func:`truncate_to`).

Replication decides when (see :mod:`pymq.broker.ha.epochs`); these only do it, under all three
store locks. :class:`~pymq.broker.store.message_store.MessageStore` exposes them as methods and
hands itself over as a :class:`~pymq.broker.store.store_view.ReplicaView`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.errors import StoreError
from pymq.logs import get_logger
from pymq.protocol.record import BLANK_SIZE, is_blank_marker

if TYPE_CHECKING:
    from pymq.broker.store.commitlog import CommitLog
    from pymq.broker.store.store_view import ReplicaView

log = get_logger("broker.store")


def start_at(store: ReplicaView, offset: int) -> None:
    """Make an empty commitlog begin at file boundary ``offset``."""
    with store.lock, store.file_lock, store.logics_lock:
        cl = store.commitlog
        if cl.max_offset != 0 or any(cq.max_offset for cq in store.queues.values()):
            raise StoreError("only an empty store can be moved to another start offset")
        if offset % cl.file_size:
            raise StoreError(f"a commitlog starts at a file boundary, not at {offset}")
        if offset:
            cl.mfq.truncate(-1)  # drops the empty first file; append_raw creates the one at offset


def truncate_to(store: ReplicaView, offset: int) -> int:
    """Drop every record from commitlog offset ``offset`` on; returns the bytes dropped."""
    with store.lock, store.file_lock, store.logics_lock:
        cl = store.commitlog
        end = cl.max_offset
        if offset == end:
            return 0
        if offset > end or offset < cl.min_offset:
            raise StoreError(f"cannot truncate the commitlog to {offset}: its data is [{cl.min_offset}, {end})")
        if not is_record_boundary(cl, offset):
            raise StoreError(f"cannot truncate the commitlog to {offset}: no record starts there")
        cl.mfq.truncate(offset)
        dropped_cq = sum(cq.truncate_beyond(offset) for cq in store.queues.values())
        dropped_index = store.index.truncate_from(offset)
        store.checkpoint.flushed_phys = min(store.checkpoint.flushed_phys, offset)
        store.disk_guard.recheck()
    log.warning(
        "store_truncated",
        offset=offset,
        dropped_bytes=end - offset,
        dropped_cq_entries=dropped_cq,
        dropped_index_entries=dropped_index,
    )
    return end - offset


def is_record_boundary(commitlog: CommitLog, offset: int) -> bool:
    """A record, a blank marker or a file starts at ``offset``."""
    if offset % commitlog.file_size == 0 or commitlog.read_record(offset) is not None:
        return True
    view = commitlog.view(offset, BLANK_SIZE)
    return view is not None and is_blank_marker(view)
