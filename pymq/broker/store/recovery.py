"""Bringing a store back to a consistent state at startup.

Consume queues and index files are loaded first (each consume queue ends at its first
all-zero entry; index entries written past a file's header count are rolled back, see
:meth:`pymq.broker.store.index.IndexFile.rollback_uncounted`). Then the commitlog:

* **Clean shutdown** (no abort file): the checkpoint records the exact commitlog end; the
  file holding it is scanned (records verified) to confirm it.
* **Abnormal shutdown** (abort file present): scanning starts at the newest commitlog file
  whose first record was stored at least ``SAFE_MARGIN_MS`` before
  ``min(checkpoint.physic_ts, checkpoint.logics_ts)``. Every record is verified (magic,
  lengths, body CRC, and a broker block that was actually written: see
  :meth:`pymq.broker.store.commitlog.CommitLog.scan`); the commitlog is truncated at the
  first invalid one and what follows is zeroed. Each record is re-dispatched if its
  consume queue lacks it, and indexed if it is past the newest index entry. For records
  stored after ``logics_ts - SAFE_MARGIN_MS`` (consume-queue data that may not have been
  synced, or whose last copy was torn) the existing entry is compared and rewritten if it
  differs, and a queue's entries past its last record in the commitlog are dropped.

Either way, consume-queue entries pointing past the commitlog end are dropped and min
offsets move past deleted data — except for queues whose ends a clean shutdown recorded
(:mod:`pymq.broker.store.queue_ends`) for the same commitlog range: those are taken as
recorded, without mapping their files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pymq.broker.store.consume_queue import CQ_ENTRY, ConsumeQueue
from pymq.logs import get_logger
from pymq.protocol.record import is_record_at, record_store_timestamp

if TYPE_CHECKING:
    from pymq.broker.store.store_view import RecoveryView

log = get_logger("broker.store.recovery")

SAFE_MARGIN_MS = 3000


@dataclass
class RecoveryReport:
    abnormal: bool
    commitlog_end: int = 0
    scanned_bytes: int = 0
    scanned_records: int = 0
    redispatched_cq: int = 0
    repaired_cq: int = 0
    redispatched_index: int = 0
    rolled_back_index: int = 0
    truncated_bytes: int = 0
    dropped_cq_entries: int = 0
    seconds: float = 0.0

    @property
    def mb_per_second(self) -> float:
        return self.scanned_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


class _QueueState:
    """Per (topic, queue id) bookkeeping during an abnormal scan."""

    __slots__ = ("cq", "last", "max", "topic")

    def __init__(self, topic: str, cq: ConsumeQueue | None) -> None:
        self.topic = topic
        self.cq = cq
        self.max = cq.max_offset if cq is not None else 0
        #: queue offset of the last record of this queue seen in the verified region
        self.last = -1


def _scan_start_abnormal(store: RecoveryView) -> int:
    files = store.commitlog.mfq.files
    if not files:
        return 0
    safe_ts = store.checkpoint.min_ts - SAFE_MARGIN_MS
    for mf in reversed(files):
        if not is_record_at(mf.mm, 0):
            continue
        first_ts = record_store_timestamp(mf.mm, 0)
        if 0 < first_ts <= safe_ts:
            return mf.file_from
    return files[0].file_from


def _scan_start(store: RecoveryView, abnormal: bool) -> int:
    mfq = store.commitlog.mfq
    files = mfq.files
    if not files:
        return 0
    if abnormal:
        return _scan_start_abnormal(store)
    clean_end = store.checkpoint.clean_end
    if clean_end >= 0:
        mf = mfq.find(clean_end)
        if mf is not None:
            return mf.file_from
        if clean_end == files[-1].file_to:
            return files[-1].file_from
    # No usable end recorded: verify the last three files.
    return files[max(0, len(files) - 3)].file_from


def recover(store: RecoveryView, *, abnormal: bool) -> RecoveryReport:
    started = time.perf_counter()
    report = RecoveryReport(abnormal=abnormal)
    commitlog = store.commitlog
    commitlog.mfq.load()
    files = commitlog.mfq.files
    start = _scan_start(store, abnormal)
    check_crc = store.config.check_crc_on_recover
    last_ts = 0
    records = scanned = 0
    if abnormal:
        last_ts, records, scanned = _redispatch(store, start, check_crc, report)
    else:
        for _mf, _pos, size, _ta, _pa, _qid, _qoff, ts in commitlog.scan(start, check_crc):
            records += 1
            scanned += size
            last_ts = ts
    report.scanned_records = records
    report.scanned_bytes = scanned
    end = commitlog.scan_end if files else 0
    if not abnormal and store.checkpoint.clean_end >= 0 and end != store.checkpoint.clean_end:
        log.warning("commitlog_end_differs_from_checkpoint", scanned_end=end, checkpoint=store.checkpoint.clean_end)
    report.truncated_bytes = commitlog.mfq.truncate(end)
    report.commitlog_end = commitlog.max_offset
    last = commitlog.mfq.last
    if last is not None:
        last.flushed_pos = last.wrote_pos
    min_phys = commitlog.min_offset
    # Queues whose ends the clean shutdown recorded for this very commitlog range need no
    # checks (and stay unmapped): nothing was appended or deleted since.
    trust = store.restored_range == (min_phys, report.commitlog_end)
    for cq in list(store.queues.values()):
        if trust and cq.restored:
            continue
        report.dropped_cq_entries += cq.truncate_beyond(report.commitlog_end)
        cq.correct_min_offset(min_phys)
    ck = store.checkpoint
    store.last_store_ts = max(last_ts, ck.physic_ts, ck.logics_ts)
    report.seconds = time.perf_counter() - started
    return report


def _redispatch(store: RecoveryView, start: int, check_crc: bool, report: RecoveryReport) -> tuple[int, int, int]:
    """The abnormal scan; returns (store time of the last record, records, bytes)."""
    commitlog = store.commitlog
    index = store.index
    dispatcher = store.dispatcher
    report.rolled_back_index = store.index_rolled_back
    tail_phys, tail_hashes = index.tail()
    verify_ts = store.checkpoint.logics_ts - SAFE_MARGIN_MS
    states: dict[tuple[bytes, int], _QueueState] = {}
    queues = store.queues
    last_ts = records = scanned = 0
    for mf, pos, size, topic_at, props_at, qid, qoff, store_ts in commitlog.scan(start, check_crc):
        records += 1
        scanned += size
        last_ts = store_ts
        mm = mf.mm
        key = (mm[topic_at : props_at - 2], qid)
        st = states.get(key)
        if st is None:
            topic = key[0].decode(errors="replace")
            st = states[key] = _QueueState(topic, queues.get((topic, qid)))
        verify = store_ts >= verify_ts
        phys = mf.file_from + pos
        if qoff >= st.max or verify:
            # The same entry the live path wrote: the dispatcher's rule.
            entry = CQ_ENTRY.pack(phys, size, dispatcher.tags_code(st.topic, mm[props_at : pos + size], store_ts))
            if qoff >= st.max:
                if st.cq is None:
                    st.cq = store.queue_for(st.topic, qid)
                st.cq.append(entry, qoff)
                st.max = qoff + 1
                report.redispatched_cq += 1
            elif st.cq is not None and st.cq.fix_entry(qoff, entry):
                report.repaired_cq += 1
            if verify:
                st.last = qoff
        if phys >= tail_phys:
            hashes = dispatcher.index_hashes(st.topic, mm[props_at : pos + size])
            if phys == tail_phys:
                hashes = [h for h in hashes if h not in tail_hashes]
            if hashes:
                index.put_many([(h, phys) for h in hashes], store_ts)
                report.redispatched_index += 1
    # Entries past a queue's last record in the commitlog point at nothing real.
    for st in states.values():
        if st.last >= 0 and st.cq is not None and st.cq.max_offset > st.last + 1:
            report.dropped_cq_entries += st.cq.max_offset - st.last - 1
            st.cq.truncate_to(st.last + 1)
    return last_ts, records, scanned
