"""The write path: validate a producer's batch, append it to the commitlog, dispatch it.

This is the hottest code in the broker, so it works on the producer's bytes directly, in
three C-heavy passes: :func:`pymq.protocol.record_batch.split_batch` validates every record
(lengths, topic, size, CRC); :meth:`CommitLog.append` copies the valid ones as they came
(adjacent ones with one memcpy) and patches only the broker-assigned block (queue id,
queue offset, commitlog offset, store time, store host); :meth:`Dispatcher.dispatch`
writes the batch's consume-queue entries with one copy and its index entries in one call.

Crash safety: the copy of a run lands before its broker blocks are patched, so recovery
only accepts a record whose physical-offset field equals its position and whose store
time is set (see :class:`pymq.protocol.record_batch.StoredScan`). Consume-queue and index
entries are written after the records they point to.

The store stores what it is given: moving a record elsewhere first (delays, retries) is
the broker's business (:mod:`pymq.broker.put_path`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pymq.broker.store.commitlog import BLANK_MIN
from pymq.broker.store.consume_queue import CQ_ENTRY_SIZE
from pymq.broker.store.results import PutResult, PutResults, PutStatus, StoredRun
from pymq.errors import StoreError
from pymq.protocol import record as _record
from pymq.protocol.record import topic_field
from pymq.protocol.record_batch import (
    REJECT_PROPERTIES_SIZE,
    SplitBatch,
    _batch_rejection,
    count_records,
    split_batch,
)

_new_split = tuple.__new__

if TYPE_CHECKING:
    from pymq.broker.store.commitlog import CommitLog
    from pymq.broker.store.dispatcher import Dispatcher


class Appender:
    def __init__(
        self, commitlog: CommitLog, dispatcher: Dispatcher, *, store_host: bytes, max_message_size: int
    ) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.store_host = store_host
        # A record must also fit in one commitlog file with room for the blank marker.
        self.max_message_size = min(max_message_size, commitlog.file_size - BLANK_MIN)
        #: topic -> the topic as stored in a record (u16 length + UTF-8 name)
        self._topic_fields: dict[str, bytes] = {}
        #: after put(): records stored and their bytes
        self.stored = 0
        self.stored_bytes = 0
        #: the store's (commitlog flush, logics flush) locks, taken to delete files in _undo
        self.file_locks: tuple[threading.Lock, threading.Lock] = (threading.Lock(), threading.Lock())

    def _topic_field(self, topic: str) -> bytes:
        tf = self._topic_fields.get(topic)
        if tf is None:
            tf = self._topic_fields[topic] = topic_field(topic.encode())
        return tf

    def split(self, topic: str, data: bytes) -> SplitBatch:
        """Validate ``data`` as a batch for ``topic`` (see :func:`~pymq.protocol.record_batch.split_batch`)."""
        tf = self._topic_fields.get(topic)
        if tf is None:
            tf = self._topic_field(topic)
        speedups = _record.speedups  # split_batch, without its wrapper's call
        if speedups is not None:
            split = speedups.split_batch(data, tf, self.max_message_size, _batch_rejection)
            if split is not NotImplemented:
                return _new_split(SplitBatch, split)
        return split_batch(data, tf, self.max_message_size)

    def put(self, topic: str, queue_id: int, data: bytes, store_ts: int, split: SplitBatch | None = None) -> PutResults:
        """Validate and append every record of ``data`` (call under the store lock); one result each.

        A record that fails validation gets its own status and the others are stored. If a
        commitlog or consume-queue file cannot be created, nothing of the batch stays and
        :class:`~pymq.errors.StoreError` is raised. Afterwards :attr:`stored` and
        :attr:`stored_bytes` describe what was stored.
        """
        positions, sizes, props_ats, rejected = split or self.split(topic, data)
        if len(positions) == 1 and not rejected:
            return self.put_single(topic, queue_id, data, positions[0], sizes[0], props_ats[0], store_ts)
        self.stored = self.stored_bytes = 0
        results: list[PutResult] = []
        cq = self.dispatcher.queue_for(topic, queue_id)  # a put creates its queue, even if nothing is stored
        if positions:
            commitlog = self.commitlog
            first_qoff = cq.max_offset
            start_phys = commitlog.max_offset
            try:
                phys = commitlog.append(data, positions, sizes, queue_id, first_qoff, store_ts, self.store_host)
                self.dispatcher.dispatch(topic, cq, first_qoff, data, positions, sizes, props_ats, phys, store_ts)
            except StoreError:
                # A new commitlog or consume-queue file could not be created (disk full?): undo
                # the whole batch, so that no record is stored without its consume-queue entry.
                self.undo(start_phys, [(topic, queue_id, first_qoff)])
                raise
            self.stored = len(phys)
            self.stored_bytes = sum(sizes)
            if len(phys) == 1 and not rejected:  # single sends
                return [PutResult(PutStatus.PUT_OK, first_qoff, phys[0], sizes[0], store_ts, topic, queue_id, "")]
            run = StoredRun(topic, queue_id, first_qoff, phys, sizes, store_ts)
            if not rejected:  # a batch stored whole: no object per record
                return run
            results = list(run)
        if rejected:
            results = _merge(results, rejected)
        return results

    def put_single(
        self, topic: str, queue_id: int, data: bytes, pos: int, size: int, props_at: int, store_ts: int
    ) -> list[PutResult]:
        """:meth:`put` of a batch of one valid record (every single send): the same steps, no lists.

        The single send's fast path (with ``CommitLog.append_one``, ``Dispatcher.dispatch_one``,
        ``BrokerStats.record_put_one`` and the send handler's inline answer): without it a send
        costs 41 % more instructions (``benchmarks/callgrind_send.py``, issue 29).

        ``pos``, ``size``, ``props_at``: the record's place in ``data`` (its :meth:`split`).
        """
        dispatcher = self.dispatcher
        commitlog = self.commitlog
        cq = dispatcher.queue_for(topic, queue_id)
        qoff = cq.mfq.max_offset // CQ_ENTRY_SIZE  # cq.max_offset, one call fewer
        # commitlog.max_offset, read directly: the undo point if a file cannot be created
        files = commitlog.mfq.files
        last = files[-1] if files else None
        start_phys = last.file_from + last.wrote_pos if last is not None else 0
        try:
            phys = commitlog.append_one(data, pos, size, queue_id, qoff, store_ts, self.store_host)
            dispatcher.dispatch_one(topic, cq, qoff, data, pos, size, props_at, phys, store_ts)
        except StoreError:
            self.undo(start_phys, [(topic, queue_id, qoff)])
            self.stored = self.stored_bytes = 0
            raise
        self.stored = 1
        self.stored_bytes = size
        return [PutResult(PutStatus.PUT_OK, qoff, phys, size, store_ts, topic, queue_id, "")]

    def undo(self, start_phys: int, queues: list[tuple[str, int, int]]) -> None:
        """Undo puts: the commitlog from ``start_phys``, each ``(topic, queue_id, end)`` queue to its end.

        Index entries already written stay: lookups verify the record they find.
        """
        # Files may be deleted here: keep the flush threads off them meanwhile.
        with self.file_locks[0], self.file_locks[1]:
            self.commitlog.mfq.truncate(start_phys)
            for topic, queue_id, end in reversed(queues):  # reversed: a queue's earliest end wins
                self.dispatcher.queue_for(topic, queue_id).truncate_to(end)


def _merge(ok: list[PutResult], rejected: list[tuple[int, int, str]]) -> list[PutResult]:
    """Put the rejections back at their positions among the PUT_OK results."""
    out: list[PutResult] = []
    it = iter(ok)
    for position, kind, reason in rejected:
        while len(out) < position:
            out.append(next(it))
        status = PutStatus.PROPERTIES_SIZE_EXCEEDED if kind == REJECT_PROPERTIES_SIZE else PutStatus.MESSAGE_ILLEGAL
        out.append(PutResult(status, reason=reason))
    out.extend(it)
    return out


def rejected_results(count: int, status: PutStatus, reason: str) -> list[PutResult]:
    return [PutResult(status, reason=reason)] * count


__all__ = ["Appender", "count_records", "rejected_results"]
