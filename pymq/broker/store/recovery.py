"""Bringing a store back to a consistent state at startup.

Clean shutdown (no abort file): the checkpoint records the exact commitlog end; only the
last file is scanned to confirm it. Abnormal shutdown (abort file present): scanning
starts at the newest commitlog file whose first record was stored at least 3 s before the
checkpoint's flushed times, every record is verified (magic, lengths, CRC), consume-queue
and index entries the store lacks are re-dispatched, and the commitlog is truncated at
the first invalid record. Either way, consume-queue entries pointing past the commitlog end
are dropped and min offsets move past deleted data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pymq.broker.store.consume_queue import CQ_ENTRY
from pymq.broker.store.index import key_hash
from pymq.protocol.record import find_property, parse_record, record_store_timestamp, tag_hash

if TYPE_CHECKING:
    from pymq.broker.store.message_store import MessageStore

SAFE_MARGIN_MS = 3000


@dataclass
class RecoveryReport:
    abnormal: bool
    commitlog_end: int = 0
    scanned_bytes: int = 0
    scanned_records: int = 0
    redispatched_cq: int = 0
    redispatched_index: int = 0
    truncated_bytes: int = 0
    dropped_cq_entries: int = 0
    seconds: float = 0.0

    @property
    def mb_per_second(self) -> float:
        return self.scanned_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def _scan_start_abnormal(store: MessageStore) -> int:
    files = store.commitlog.mfq.files
    if not files:
        return 0
    safe_ts = store.checkpoint.min_ts - SAFE_MARGIN_MS
    for mf in reversed(files):
        first_ts = record_store_timestamp(mf.mm, 0) if mf.mm[4:8] != b"\x00\x00\x00\x00" else 0
        if first_ts and first_ts <= safe_ts:
            return mf.file_from
    return files[0].file_from


def recover(store: MessageStore, *, abnormal: bool) -> RecoveryReport:
    started = time.perf_counter()
    report = RecoveryReport(abnormal=abnormal)
    commitlog = store.commitlog
    commitlog.mfq.load()
    files = commitlog.mfq.files
    clean_end = store.checkpoint.clean_end
    if not files:
        start = 0
    elif not abnormal and clean_end >= 0 and commitlog.mfq.find(clean_end) is not None:
        start = commitlog.mfq.find(clean_end).file_from  # type: ignore[union-attr]
    elif not abnormal and clean_end >= 0 and clean_end == files[-1].file_to:
        start = files[-1].file_from
    elif not abnormal:
        start = files[max(0, len(files) - 3)].file_from
    else:
        start = _scan_start_abnormal(store)

    index_max_phys = store.index.max_phys
    check_crc = store.config.check_crc_on_recover
    queues = store.queues
    last_record = None
    for mf, pos, size in commitlog.scan(start, check_crc):
        report.scanned_records += 1
        report.scanned_bytes += size
        last_record = (mf, pos)
        if not abnormal:
            continue
        phys = mf.file_from + pos
        # Cheap checks first: most records are already dispatched.
        queue_id, queue_offset = store.QID_QOFF.unpack_from(mf.mm, pos + 48)
        need_index = phys > index_max_phys
        r = None
        topic = store.topic_at(mf.mm, pos)
        cq = queues.get((topic, queue_id))
        if cq is None or queue_offset >= cq.max_offset:
            r = parse_record(mf.mm, pos)
            props = r.properties
            tags = find_property(props, b"TAGS\x01") if props else None
            code = tag_hash(tags)
            if topic == store.SCHEDULE_TOPIC:
                level = int(find_property(props, b"DELAY\x01") or b"1")
                code = r.store_timestamp + store.delay_levels_ms[min(level, len(store.delay_levels_ms)) - 1]
            store.queue_for(topic, queue_id).append(CQ_ENTRY.pack(phys, size, code), queue_offset)
            report.redispatched_cq += 1
        if need_index:
            if r is None:
                r = parse_record(mf.mm, pos)
            hashes = _index_hashes(topic, r.properties)
            if hashes:
                store.index.put_keys(hashes, phys, r.store_timestamp)
                report.redispatched_index += 1
    end = commitlog.scan_end if files else 0
    before = commitlog.max_offset
    commitlog.mfq.truncate(end)
    report.truncated_bytes = max(0, before - end) if abnormal else 0
    report.commitlog_end = commitlog.max_offset
    # Every file before the end is full; set positions for files fully before the scan start.
    for mf in commitlog.mfq.files:
        if mf.file_to <= end:
            mf.wrote_pos = mf.flushed_pos = mf.size
    last = commitlog.mfq.last
    if last is not None:
        last.flushed_pos = last.wrote_pos
    min_phys = commitlog.min_offset
    for cq in list(queues.values()):
        report.dropped_cq_entries += cq.truncate_beyond(report.commitlog_end)
        cq.correct_min_offset(min_phys)
    store.index.sync_header()
    if last_record is not None and last_record[0].file_from + last_record[1] < report.commitlog_end:
        store.last_store_ts = record_store_timestamp(last_record[0].mm, last_record[1])
    else:
        store.last_store_ts = store.checkpoint.physic_ts
    report.seconds = time.perf_counter() - started
    return report


def _index_hashes(topic: str, props: bytes) -> list[int]:
    if not props:
        return []
    prefix = topic.encode() + b"#"
    out = []
    uniq = find_property(props, b"UNIQ_KEY\x01")
    if uniq:
        out.append(key_hash(prefix + uniq))
    keys = find_property(props, b"KEYS\x01")
    if keys:
        out.extend(key_hash(prefix + k) for k in keys.split(b" ") if k)
    return out
