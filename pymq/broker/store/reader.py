"""The store's read side: a consume queue's entries turned into commitlog slices, and key lookups.

Plain functions over the commitlog, a consume queue and the index; the facade
(:class:`~pymq.broker.store.message_store.MessageStore`) calls them under its lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.broker.store.consume_queue import CQ_ENTRY
from pymq.broker.store.results import GetResult, GetStatus
from pymq.protocol.record import find_property, parse_record, record_store_timestamp

if TYPE_CHECKING:
    from pymq.broker.store.commitlog import CommitLog
    from pymq.broker.store.consume_queue import ConsumeQueue
    from pymq.broker.store.index import IndexService

#: consume-queue entries a tag-filtered read may look at past its start, to find matches
FILTER_SCAN_ENTRIES = 800


def get_from_queue(
    commitlog: CommitLog,
    cq: ConsumeQueue | None,
    offset: int,
    max_count: int,
    max_bytes: int,
    tag_codes: frozenset[int] | set[int] | None,
) -> GetResult:
    """A pull's answer: the status for an offset outside the queue (RocketMQ's GetMessageStatus
    rules), else :func:`read_queue`. The caller holds the store lock."""
    if cq is None:
        return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_off, max_off = cq.min_offset, cq.max_offset
    if max_off == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
    if offset < min_off:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
    if offset == max_off:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
    if offset > max_off:
        next_offset = min_off if min_off == 0 else max_off
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_off, max_off)
    return read_queue(commitlog, cq, offset, max_count, max_bytes, tag_codes, min_off, max_off)


def read_queue(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    offset: int,
    max_count: int,
    max_bytes: int,
    tag_codes: frozenset[int] | set[int] | None,
    min_off: int,
    max_off: int,
) -> GetResult:
    """Up to ``max_count`` records of ``cq`` from ``offset`` (at most ``max_bytes``, tags filtered by
    ``tag_codes``) as slices of the mapped commitlog files; adjacent records share one slice."""
    cl_min = commitlog.min_offset
    cl_max = commitlog.max_offset
    scan_limit = max(max_count, FILTER_SCAN_ENTRIES) if tag_codes else max_count
    buffers: list[memoryview] = []
    count = total = 0
    next_offset = offset
    removed = filtered = 0
    run_file = None
    run_start = run_end = 0
    max_phys_read = 0
    first_phys = -1
    while count < max_count and next_offset < max_off and next_offset - offset < scan_limit:
        raw = cq.read_entries(next_offset, min(scan_limit - (next_offset - offset), max_off - next_offset))
        if not raw:
            break
        stop = False
        for phys, size, code in CQ_ENTRY.iter_unpack(raw):
            if count >= max_count or (count and total + size > max_bytes):
                stop = True
                break
            next_offset += 1
            if size == 0x7FFFFFFF or phys < cl_min:
                removed += 1
                continue
            if phys + size > cl_max:
                next_offset -= 1
                stop = True
                break
            if tag_codes and code not in tag_codes:
                filtered += 1
                continue
            mf = commitlog.mfq.find(phys)
            if mf is None:
                removed += 1
                continue
            pos = phys - mf.file_from
            if run_file is mf and pos == run_end:
                run_end = pos + size
            else:
                if run_file is not None:
                    buffers.append(memoryview(run_file.mm)[run_start:run_end])
                run_file, run_start, run_end = mf, pos, pos + size
            count += 1
            total += size
            max_phys_read = phys + size
            if first_phys < 0:
                first_phys = phys
        if stop:
            break
    if run_file is not None:
        buffers.append(memoryview(run_file.mm)[run_start:run_end])
    if count:
        status = GetStatus.FOUND
    elif filtered:
        status = GetStatus.NO_MATCHED_MESSAGE
    elif removed:
        status = GetStatus.MESSAGE_WAS_REMOVING
    else:
        status = GetStatus.OFFSET_FOUND_NULL
    return GetResult(status, next_offset, min_off, max_off, buffers, count, total, max_phys_read, max(first_phys, 0))


def find_by_key(
    index: IndexService,
    commitlog: CommitLog,
    topic: str,
    key: str,
    max_count: int = 32,
    begin_ts: int = 0,
    end_ts: int | None = None,
) -> list[memoryview]:
    """Records of ``topic`` with ``key`` (business key or unique id) stored in ``[begin_ts, end_ts]``.

    The index gives candidates (hashes collide); each is read and checked for the topic, time and key.
    """
    end_ts = end_ts if end_ts is not None else 2**62
    key_b = key.encode()
    topic_b = topic.encode()
    out: list[memoryview] = []
    seen: set[int] = set()
    for phys in index.lookup(topic_b + b"#" + key_b, begin_ts, end_ts, max_count * 4 + 16):
        if phys in seen:
            continue
        seen.add(phys)
        rec = commitlog.read_record(phys)
        if rec is None:
            continue
        r = parse_record(rec)
        if r.topic != topic_b or not begin_ts <= r.store_timestamp <= end_ts:
            continue
        if _record_has_key(r.properties, key_b):
            out.append(rec)
            if len(out) >= max_count:
                break
    return out


def _record_has_key(props: bytes, key: bytes) -> bool:
    uniq = find_property(props, b"UNIQ_KEY\x01")
    if uniq == key:
        return True
    keys = find_property(props, b"KEYS\x01")
    return keys is not None and key in keys.split(b" ")


# --- by time ------------------------------------------------------------------------------------------------


def offset_by_time(cq: ConsumeQueue, commitlog: CommitLog, timestamp: int) -> int:
    """The first offset of ``cq`` whose record was stored at or after ``timestamp`` (its max offset if none)."""
    lo, hi = cq.min_offset, cq.max_offset
    cl_min = commitlog.min_offset
    while lo < hi:
        mid = (lo + hi) // 2
        e = cq.entry(mid)
        if e is None or e[1] == 0x7FFFFFFF or e[0] < cl_min:
            lo = mid + 1
            continue
        rec = commitlog.view(e[0], e[1])
        if rec is None or record_store_timestamp(rec, 0) < timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo


def store_time_at(cq: ConsumeQueue, commitlog: CommitLog, offset: int) -> int:
    """Store timestamp of the record at ``offset`` of ``cq`` (0 if gone)."""
    e = cq.entry(offset)
    if e is None or e[1] == 0x7FFFFFFF:
        return 0
    rec = commitlog.view(e[0], e[1])
    return record_store_timestamp(rec, 0) if rec is not None else 0
