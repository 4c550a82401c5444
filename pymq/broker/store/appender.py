"""The write path: validate a batch of encoded records, append them, dispatch them.

This is the hottest code in the broker, so it works on the producer's bytes directly:
each valid record is copied into the commitlog as it came and only the broker-assigned
block (queue id, queue offset, commitlog offset, store time, store host) is patched in
place. Adjacent valid records are copied with one memcpy ("a run") and patched after.
Validation and writing are one pass over the batch, done under the store lock; every
per-record step is a handful of C calls. Consume-queue entries for the batch are packed
with one ``struct`` call and written with one copy; index entries go in one call too.

Records with a delay level are the exception: they are re-encoded for the schedule topic
(queue ``level - 1``, with ``REAL_TOPIC``/``REAL_QID`` properties), as RocketMQ does, and
their consume-queue tags code is the delivery time in ms.

Crash safety: the copy of a run lands before its broker blocks are patched, so recovery
only accepts a record whose physical-offset field equals its position and whose store
time is set (see :meth:`pymq.broker.store.commitlog.CommitLog.scan`). Consume-queue and
index entries are written after the records they point to.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from itertools import repeat
from typing import TYPE_CHECKING

from pymq.broker.store.commitlog import BLANK_MIN
from pymq.broker.store.consume_queue import CQ_ENTRY
from pymq.broker.store.results import PutResult, PutStatus
from pymq.errors import StoreError
from pymq.logs import get_logger
from pymq.protocol.message import Prop
from pymq.protocol.record import (
    BODY_POS,
    BROKER_BLOCK,
    BROKER_BLOCK_OFFSET,
    HEAD,
    MAGIC,
    MAX_PROPERTIES_SIZE,
    MIN_RECORD_SIZE,
    decode_properties,
    encode_properties,
    find_property,
    parse_record,
    reencode,
    tag_hash,
)

if TYPE_CHECKING:
    from pymq.broker.store.commitlog import CommitLog
    from pymq.broker.store.consume_queue import ConsumeQueue
    from pymq.broker.store.index import IndexService
    from pymq.broker.store.mapped_file import MappedFile

log = get_logger("broker.store")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

#: total_size, magic, body_crc, (skipped to byte 84), body_len
_HDR = struct.Struct(">iII72xi")
_U16 = struct.Struct(">H")
_TAGS = b"TAGS\x01"
_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY\x01"
_DELAY = b"DELAY\x01"
_new_result = tuple.__new__
_CQ_PACKERS: dict[int, struct.Struct] = {}


def _cq_packer(count: int) -> struct.Struct:
    """A ``struct`` packing ``count`` consume-queue entries from one flat argument list."""
    s = _CQ_PACKERS.get(count)
    if s is None:
        s = struct.Struct(">" + "qiq" * count)
        if count <= 256:
            _CQ_PACKERS[count] = s
    return s


class _Delayed:
    """A record re-encoded for the schedule topic."""

    __slots__ = ("data", "keys", "level", "qid")

    def __init__(self, data: bytes, level: int, keys: list[bytes]) -> None:
        self.data = data
        self.level = level
        self.qid = level - 1
        self.keys = keys


class Appender:
    def __init__(
        self,
        commitlog: CommitLog,
        queue_for: Callable[[str, int], ConsumeQueue],
        index: IndexService,
        *,
        store_host: bytes,
        max_message_size: int,
        delay_levels_ms: list[int],
    ) -> None:
        self.commitlog = commitlog
        self.queue_for = queue_for
        self.index = index
        self.store_host = store_host
        # A record must also fit in one commitlog file with room for the blank marker.
        self.max_message_size = min(max_message_size, commitlog.file_size - BLANK_MIN)
        self.delay_levels_ms = delay_levels_ms
        #: topic -> (u16 length + UTF-8 name as stored in a record, b"topic#" key prefix)
        self._topic_fields: dict[str, tuple[bytes, bytes]] = {}
        #: b"TAGS\x01<tag>" -> tags code
        self._tag_codes: dict[bytes, int] = {}
        #: after put(): records stored, their bytes, and the (topic, queue) pairs other than
        #: the request's that received some (delayed messages), or None
        self.stored = 0
        self.stored_bytes = 0
        self.other_queues: list[tuple[str, int]] | None = None
        #: (queue, its end before the put) of each delayed record of the current put
        self._delayed_undo: list[tuple[ConsumeQueue, int]] = []
        #: the store's (commitlog flush, logics flush) locks, taken to delete files in _undo
        self.file_locks: tuple[threading.Lock, threading.Lock] = (threading.Lock(), threading.Lock())

    def _tag_code(self, tag_property: bytes) -> int:
        """crc32 of the tag in ``b"TAGS\x01<tag>"``, remembered (a bounded cache: tags repeat)."""
        if len(self._tag_codes) >= 4096:
            self._tag_codes.clear()
        code = self._tag_codes[tag_property] = zlib.crc32(tag_property[5:])
        return code

    def _topic_field(self, topic: str) -> tuple[bytes, bytes]:
        tf = self._topic_fields.get(topic)
        if tf is None:
            tb = topic.encode()
            tf = self._topic_fields[topic] = (_U16.pack(len(tb)) + tb, tb + b"#")
        return tf

    def put(self, topic: str, queue_id: int, data: bytes, store_ts: int) -> list[PutResult]:
        """Validate and append every record of ``data`` (call under the store lock); one result each.

        A record that fails validation gets its own status and the others are stored. If a
        commitlog or consume-queue file cannot be created, nothing of the batch stays and
        :class:`~pymq.errors.StoreError` is raised. Afterwards :attr:`stored`,
        :attr:`stored_bytes` and :attr:`other_queues` describe what was stored.
        """
        topic_field, key_prefix = self._topic_field(topic)
        prefix_crc = zlib.crc32(key_prefix)
        tlen2 = len(topic_field)
        n = len(data)
        view = memoryview(data)
        max_size = self.max_message_size
        unpack_hdr = _HDR.unpack_from
        unpack_u16 = _U16.unpack_from
        startswith = data.startswith
        crc32 = zlib.crc32
        tag_codes = self._tag_codes
        commitlog = self.commitlog
        cq = self.queue_for(topic, queue_id)
        qoff = first_qoff = cq.max_offset
        # Results other than PUT_OK on the request's queue, with their position in the batch;
        # the PUT_OK ones are made in one go at the end.
        others: list[tuple[int, PutResult]] = []
        cq_vals: list[int] = []  # phys, size, tags code per record, flat
        index_entries: list[tuple[int, int]] = []
        add_index = index_entries.append
        patches: list[int] = []  # positions in the file of the run's records
        add_patch = patches.append
        ok = PutStatus.PUT_OK
        illegal = PutStatus.MESSAGE_ILLEGAL
        self.other_queues = None
        stored_bytes = 0
        self._delayed_undo = []
        mf = commitlog.file_for_append(0)
        wpos, fsize, base = mf.wrote_pos, mf.size, mf.file_from
        start_phys = base + wpos
        run_src = run_dst = run_len = run_qoff = 0
        pos = 0
        try:
            while pos < n:
                try:
                    size, magic, crc, body_len = unpack_hdr(data, pos)
                except struct.error:
                    _place(
                        others,
                        qoff - first_qoff,
                        PutResult(illegal, reason=f"truncated record at byte {pos} of the batch"),
                    )
                    break
                end = pos + size
                if magic != MAGIC or size < MIN_RECORD_SIZE or end > n:
                    # The size cannot be trusted, so the rest of the batch cannot be split.
                    _place(
                        others,
                        qoff - first_qoff,
                        PutResult(illegal, reason=f"bad record header at byte {pos} of the batch"),
                    )
                    break
                body_end = pos + BODY_POS + body_len
                props_at = body_end + tlen2
                if (
                    body_len < 0
                    or props_at + 2 > end
                    or not startswith(topic_field, body_end)
                    or props_at + 2 + unpack_u16(data, props_at)[0] != end
                    or size > max_size
                ):
                    _place(others, qoff - first_qoff, self._rejection(data, pos, end, body_end, topic_field))
                    pos = end
                    continue
                if crc32(view[pos + BODY_POS : body_end]) != crc:
                    _place(others, qoff - first_qoff, PutResult(illegal, reason="body crc mismatch"))
                    pos = end
                    continue
                tags_code = 0
                keys = None
                uniq_hash = -1
                if props_at + 2 < end:
                    if end - props_at - 2 > MAX_PROPERTIES_SIZE:
                        _place(others, qoff - first_qoff, _properties_too_large(end - props_at - 2))
                        pos = end
                        continue
                    items = data[props_at + 2 : end].split(b"\x02")
                    # Fast path for what producers send: UNIQ_KEY, then TAGS, nothing else.
                    if len(items) == 3 and not items[2] and items[0][:9] == _UNIQ and items[1][:5] == _TAGS:
                        uniq_hash = crc32(items[0][9:], prefix_crc)
                        tags_code = tag_codes.get(items[1])  # b"TAGS\x01<tag>": few distinct ones
                        if tags_code is None:
                            tags_code = self._tag_code(items[1])
                    else:
                        tags_code, keys, delayed = _parse_properties(items)
                        if delayed:
                            d = self._delayed(data, pos, end, topic, queue_id, keys)
                            if d is not None:
                                if run_len:
                                    self._write_run(
                                        mf,
                                        view,
                                        run_src,
                                        run_dst,
                                        run_len,
                                        patches,
                                        queue_id,
                                        run_qoff,
                                        store_ts,
                                    )
                                    run_len = 0
                                    patches = []
                                    add_patch = patches.append
                                mf.wrote_pos = wpos
                                _place(
                                    others,
                                    qoff - first_qoff,
                                    self._append_delayed(d, store_ts, index_entries),
                                )
                                stored_bytes += len(d.data)
                                pos = end
                                mf = commitlog.mfq.last  # type: ignore[assignment]
                                wpos, fsize, base = mf.wrote_pos, mf.size, mf.file_from
                                continue
                if wpos + size + BLANK_MIN > fsize:
                    if run_len:
                        self._write_run(mf, view, run_src, run_dst, run_len, patches, queue_id, run_qoff, store_ts)
                        run_len = 0
                        patches = []
                        add_patch = patches.append
                    mf.wrote_pos = wpos
                    mf = commitlog.file_for_append(size)
                    wpos, fsize, base = mf.wrote_pos, mf.size, mf.file_from
                if run_len:
                    if pos != run_src + run_len:
                        self._write_run(mf, view, run_src, run_dst, run_len, patches, queue_id, run_qoff, store_ts)
                        patches = []
                        add_patch = patches.append
                        run_src, run_dst, run_len, run_qoff = pos, wpos, 0, qoff
                else:
                    run_src, run_dst, run_qoff = pos, wpos, qoff
                run_len += size
                phys = base + wpos
                add_patch(wpos)
                cq_vals += (phys, size, tags_code)
                if uniq_hash >= 0:
                    add_index((uniq_hash, phys))
                elif keys:
                    for k in keys:
                        add_index((crc32(k, prefix_crc), phys))
                qoff += 1
                wpos += size
                pos = end
            if run_len:
                self._write_run(mf, view, run_src, run_dst, run_len, patches, queue_id, run_qoff, store_ts)
            mf.wrote_pos = wpos
            if cq_vals:
                cq.append(_cq_packer(len(cq_vals) // 3).pack(*cq_vals), first_qoff)
        except StoreError:
            # A new commitlog or consume-queue file could not be created (disk full?): undo
            # the whole batch, so that no record is stored without its consume-queue entry.
            self._undo(start_phys, cq, first_qoff)
            raise
        if index_entries:
            try:
                self.index.put_many(index_entries, store_ts)
            except StoreError as exc:
                # The records are stored and consumable; only lookups by key will miss them.
                log.error("index_append_failed", entries=len(index_entries), reason=str(exc))
        self.stored = qoff - first_qoff + (len(self.other_queues) if self.other_queues else 0)
        self.stored_bytes = stored_bytes + sum(cq_vals[1::3])
        # PutResult(ok, queue offset, phys, size, store_ts, topic, queue_id, ""), built in C.
        results: list[PutResult] = list(
            map(
                _new_result,
                repeat(PutResult),
                zip(
                    repeat(ok),
                    range(first_qoff, qoff),
                    cq_vals[0::3],
                    cq_vals[1::3],
                    repeat(store_ts),
                    repeat(topic),
                    repeat(queue_id),
                    repeat(""),
                ),
            )
        )
        if others:
            results = _merge(results, others)
        return results

    def _rejection(self, data: bytes, pos: int, end: int, body_end: int, topic_field: bytes) -> PutResult:
        """Why a record whose lengths or topic do not check out is refused (the slow path)."""
        illegal = PutStatus.MESSAGE_ILLEGAL
        if body_end < pos + BODY_POS or body_end + 4 > end:
            return PutResult(illegal, reason="bad body length")
        tl = _U16.unpack_from(data, body_end)[0]
        props_at = body_end + 2 + tl
        if props_at + 2 > end:
            return PutResult(illegal, reason="bad topic length")
        if props_at + 2 + _U16.unpack_from(data, props_at)[0] != end:
            return PutResult(illegal, reason="record lengths do not add up")
        if data[body_end : body_end + 2 + tl] != topic_field:
            return PutResult(illegal, reason="record topic differs from the request topic")
        size = end - pos
        return PutResult(illegal, reason=f"message of {size} bytes exceeds the maximum {self.max_message_size}")

    def _undo(self, start_phys: int, cq: ConsumeQueue, first_qoff: int) -> None:
        """Take back everything a failed put wrote: commitlog bytes, consume-queue entries."""
        # Files may be deleted here: keep the flush threads off them meanwhile.
        with self.file_locks[0], self.file_locks[1]:
            self.commitlog.mfq.truncate(start_phys)
            cq.truncate_to(first_qoff)
            for dcq, qoff in reversed(self._delayed_undo):
                dcq.truncate_to(qoff)
        self.other_queues = None

    def _write_run(
        self,
        mf: MappedFile,
        view: memoryview,
        src: int,
        dst: int,
        length: int,
        positions: list[int],
        queue_id: int,
        qoff: int,
        store_ts: int,
    ) -> None:
        """Copy ``length`` bytes of adjacent records, then patch each one's broker block.

        ``positions`` are the records' positions in the file; their queue offsets run from ``qoff``.
        """
        if dst + length > mf.reserved:
            mf.reserve(dst + length)
        mm = mf.mm
        mm[dst : dst + length] = view[src : src + length]
        base = mf.file_from
        # One C-level loop (map) instead of a Python one: this runs once per record.
        any(
            map(
                BROKER_BLOCK.pack_into,
                repeat(mm),
                [w + BROKER_BLOCK_OFFSET for w in positions],
                repeat(queue_id),
                range(qoff, qoff + len(positions)),
                [base + w for w in positions],
                repeat(store_ts),
                repeat(self.store_host),
            )
        )

    def _delayed(
        self, data: bytes, pos: int, end: int, topic: str, queue_id: int, keys: list[bytes] | None
    ) -> _Delayed | None:
        """Re-target a record with a delay level at the schedule topic (queue = level - 1)."""
        r = parse_record(data[pos:end], 0)
        raw = find_property(r.properties, _DELAY)
        try:
            level = int(raw or b"0")
        except ValueError:
            return None
        if level <= 0 or topic == SCHEDULE_TOPIC:
            return None
        level = min(level, len(self.delay_levels_ms))
        p = decode_properties(r.properties)
        p[Prop.REAL_TOPIC] = topic
        p[Prop.REAL_QID] = str(queue_id)
        p[Prop.DELAY] = str(level)
        rec = reencode(r, SCHEDULE_TOPIC.encode(), encode_properties(p))
        if len(rec) > self.max_message_size:
            return None
        return _Delayed(rec, level, keys or [])

    def _append_delayed(self, d: _Delayed, store_ts: int, index_entries: list[tuple[int, int]]) -> PutResult:
        """Write one delayed record to the schedule topic; its tags code is the delivery time."""
        cq = self.queue_for(SCHEDULE_TOPIC, d.qid)
        qoff = cq.max_offset
        self._delayed_undo.append((cq, qoff))
        size = len(d.data)
        mf = self.commitlog.file_for_append(size)
        wpos = mf.wrote_pos
        phys = mf.file_from + wpos
        if wpos + size > mf.reserved:
            mf.reserve(wpos + size)
        mf.mm[wpos : wpos + size] = d.data
        BROKER_BLOCK.pack_into(mf.mm, wpos + BROKER_BLOCK_OFFSET, d.qid, qoff, phys, store_ts, self.store_host)
        mf.wrote_pos = wpos + size
        cq.append(CQ_ENTRY.pack(phys, size, delivery_time(store_ts, d.level, self.delay_levels_ms)), qoff)
        if d.keys:
            prefix = self._topic_field(SCHEDULE_TOPIC)[1]
            index_entries.extend((zlib.crc32(prefix + k), phys) for k in d.keys)
        if self.other_queues is None:
            self.other_queues = []
        self.other_queues.append((SCHEDULE_TOPIC, d.qid))
        return PutResult(PutStatus.PUT_OK, qoff, phys, size, store_ts, SCHEDULE_TOPIC, d.qid)


def _place(others: list[tuple[int, PutResult]], stored: int, result: PutResult) -> None:
    """Keep a result that is not PUT_OK on the request's queue, at its position in the batch."""
    others.append((stored + len(others), result))


def _merge(ok: list[PutResult], others: list[tuple[int, PutResult]]) -> list[PutResult]:
    """Put the other results back at their positions among the PUT_OK ones."""
    out: list[PutResult] = []
    it = iter(ok)
    for position, result in others:
        while len(out) < position:
            out.append(next(it))
        out.append(result)
    out.extend(it)
    return out


def _properties_too_large(size: int) -> PutResult:
    return PutResult(
        PutStatus.PROPERTIES_SIZE_EXCEEDED, reason=f"properties of {size} bytes exceed {MAX_PROPERTIES_SIZE}"
    )


def _parse_properties(items: list[bytes]) -> tuple[int, list[bytes] | None, bool]:
    """(tags code, index keys with the unique key first, has a delay level) from split properties."""
    tags_code = 0
    keys = None
    delayed = False
    # One pass, dispatching on the first byte of each key.
    for item in items:
        if not item:
            continue
        c = item[0]
        if c == 85 and item.startswith(_UNIQ):  # U
            if keys is None:
                keys = [item[9:]]
            else:
                keys.insert(0, item[9:])
        elif c == 84 and item.startswith(_TAGS):  # T
            tags_code = zlib.crc32(item[5:])
        elif c == 75 and item.startswith(_KEYS):  # K
            ks = [k for k in item[5:].split(b" ") if k]
            if keys is None:
                keys = ks
            else:
                keys.extend(ks)
        elif c == 68 and item.startswith(_DELAY):  # D
            delayed = True
    return tags_code, keys, delayed


def delivery_time(store_ts: int, level: int, delay_levels_ms: list[int]) -> int:
    """When a message stored at ``store_ts`` with delay ``level`` is due (the schedule queue's tags code)."""
    return store_ts + delay_levels_ms[min(max(level, 1), len(delay_levels_ms)) - 1]


def rejected_results(count: int, status: PutStatus, reason: str) -> list[PutResult]:
    return [PutResult(status, reason=reason)] * count


def count_records(data: bytes) -> int:
    """How many records a batch announces (for answering a batch that cannot be stored)."""
    n, pos, count = len(data), 0, 0
    while n - pos >= 8:
        size, magic = HEAD.unpack_from(data, pos)
        count += 1
        if magic != MAGIC or size < MIN_RECORD_SIZE:
            break
        pos += size
    return max(count, 1)


__all__ = ["SCHEDULE_TOPIC", "Appender", "count_records", "delivery_time", "rejected_results", "tag_hash"]
