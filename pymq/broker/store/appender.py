"""The write path: validate a batch of encoded records, append them, dispatch them.

This is the hottest code in the broker, so it works on the producer's bytes directly:
each valid record is copied into the commitlog as it came and only the broker-assigned
block (queue id, queue offset, commitlog offset, store time, store host) is patched in
place. Consume-queue entries for the batch are packed into one buffer and written with one
copy per queue. Records with a delay level are the exception: they are re-encoded for the
schedule topic, as RocketMQ does.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.broker.store.consume_queue import CQ_ENTRY
from pymq.broker.store.index import key_hash
from pymq.broker.store.results import PutResult, PutStatus
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
    encode_record,
    find_property,
    parse_record,
    tag_hash,
)

if TYPE_CHECKING:
    from pymq.broker.store.commitlog import CommitLog
    from pymq.broker.store.consume_queue import ConsumeQueue
    from pymq.broker.store.index import IndexService
    from pymq.broker.store.mapped_file import MappedFile

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

_HEAD3 = struct.Struct(">iII")  # total size, magic, body crc
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_TAGS = b"TAGS\x01"
_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY\x01"
_DELAY = b"DELAY\x01"


class _Pending:
    """A validated record waiting to be written (delayed records only; the rest stay in tuples)."""

    __slots__ = ("data", "keys", "qid", "size", "start", "tags_code", "topic")

    def __init__(self, data: bytes, start: int, size: int, topic: str, qid: int, tags_code: int, keys: list[bytes]):
        self.data = data
        self.start = start
        self.size = size
        self.topic = topic
        self.qid = qid
        self.tags_code = tags_code
        self.keys = keys


#: A valid record of the request's own queue: (start in data, size, tags code, keys).
_Valid = tuple[int, int, int, "list[bytes] | None"]
_new_result = tuple.__new__


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
        self.max_message_size = max_message_size
        self.delay_levels_ms = delay_levels_ms
        self._key_prefix: dict[str, bytes] = {}

    # --- validation -----------------------------------------------------------------------------------------

    def validate(
        self, topic: str, queue_id: int, data: bytes
    ) -> list[_Valid | _Pending | PutResult]:
        """Split ``data`` into records: per record a valid tuple, a delayed record, or a rejection."""
        topic_b = topic.encode()
        tlen = len(topic_b)
        n = len(data)
        pos = 0
        out: list[_Valid | _Pending | PutResult] = []
        view = memoryview(data)
        max_size = self.max_message_size
        crc32 = zlib.crc32
        unpack_head = _HEAD3.unpack_from
        unpack_i32 = _I32.unpack_from
        unpack_u16 = _U16.unpack_from
        startswith = data.startswith
        while pos < n:
            if n - pos < MIN_RECORD_SIZE:
                out.append(PutResult(PutStatus.MESSAGE_ILLEGAL, reason="truncated record at end of batch"))
                break
            size, magic, crc = unpack_head(data, pos)
            if magic != MAGIC or size < MIN_RECORD_SIZE or pos + size > n:
                # The size cannot be trusted, so the rest of the batch cannot be split.
                out.append(PutResult(PutStatus.MESSAGE_ILLEGAL, reason=f"bad record header at byte {pos}"))
                break
            end = pos + size
            body_end = pos + BODY_POS + unpack_i32(data, pos + 84)[0]
            reason = None
            status = PutStatus.MESSAGE_ILLEGAL
            if body_end < pos + BODY_POS or body_end + 4 > end:
                reason = "bad body length"
            else:
                tl = unpack_u16(data, body_end)[0]
                props_at = body_end + 2 + tl
                if props_at + 2 > end:
                    reason = "bad topic length"
                else:
                    pl = unpack_u16(data, props_at)[0]
                    if props_at + 2 + pl != end:
                        reason = "record lengths do not add up"
                    elif tl != tlen or not startswith(topic_b, body_end + 2):
                        reason = "record topic differs from the request topic"
                    elif size > max_size:
                        reason = f"message of {size} bytes exceeds the maximum {max_size}"
                    elif pl > MAX_PROPERTIES_SIZE:
                        status = PutStatus.PROPERTIES_SIZE_EXCEEDED
                        reason = f"properties of {pl} bytes exceed {MAX_PROPERTIES_SIZE}"
                    elif crc32(view[pos + BODY_POS : body_end]) != crc:
                        reason = "body crc mismatch"
            if reason is not None:
                out.append(PutResult(status, reason=reason))
                pos = end
                continue
            if pl:
                tags = keys = None
                delayed_flag = False
                # One pass over the properties, dispatching on the first byte of each key.
                for item in data[props_at + 2 : end].split(b"\x02"):
                    if not item:
                        continue
                    c = item[0]
                    if c == 85 and item.startswith(_UNIQ):  # U
                        if keys is None:
                            keys = [item[9:]]
                        else:
                            keys.insert(0, item[9:])
                    elif c == 84 and item.startswith(_TAGS):  # T
                        tags = item[5:]
                    elif c == 75 and item.startswith(_KEYS):  # K
                        ks = [k for k in item[5:].split(b" ") if k]
                        if keys is None:
                            keys = ks
                        else:
                            keys.extend(ks)
                    elif c == 68 and item.startswith(_DELAY):  # D
                        delayed_flag = True
                if delayed_flag:
                    delayed = self._delayed(data, pos, data[props_at + 2 : end], topic, queue_id)
                    if delayed is not None:
                        delayed.keys = keys or []
                        out.append(delayed)
                        pos = end
                        continue
                out.append((pos, size, crc32(tags) if tags else 0, keys))
            else:
                out.append((pos, size, 0, None))
            pos = end
        return out

    def _delayed(self, data: bytes, pos: int, props: bytes, topic: str, queue_id: int) -> _Pending | None:
        """Re-target a record with a delay level at the schedule topic (queue = level - 1)."""
        raw = find_property(props, _DELAY)
        try:
            level = int(raw or b"0")
        except ValueError:
            return None
        if level <= 0 or topic == SCHEDULE_TOPIC:
            return None
        level = min(level, len(self.delay_levels_ms))
        r = parse_record(data, pos)
        p = decode_properties(r.properties)
        p[Prop.REAL_TOPIC] = topic
        p[Prop.REAL_QID] = str(queue_id)
        p[Prop.DELAY] = str(level)
        rec = encode_record(
            SCHEDULE_TOPIC.encode(),
            bytes(r.body),
            encode_properties(p),
            flag=r.flag,
            sys_flag=r.sys_flag,
            born_timestamp=r.born_timestamp,
            born_host=r.born_host,
            reconsume_times=r.reconsume_times,
            prepared_tx_offset=r.prepared_tx_offset,
        )
        # A negative tags code marks "delivery time = store time + delay of level -code".
        return _Pending(rec, 0, len(rec), SCHEDULE_TOPIC, level - 1, -level, [])

    # --- writing --------------------------------------------------------------------------------------------

    def append(
        self, topic: str, queue_id: int, data: bytes, items: list[_Valid | _Pending | PutResult], store_ts: int
    ) -> list[PutResult]:
        """Write the validated records of one request; one result per item, in order."""
        commitlog = self.commitlog
        pack_cq = CQ_ENTRY.pack
        cq = self.queue_for(topic, queue_id)
        qoff = cq.max_offset
        first_qoff = qoff
        cq_entries: list[bytes] = []
        index_entries: list[tuple[int, int]] = []
        prefix = self._key_prefix.get(topic)
        if prefix is None:
            prefix = self._key_prefix[topic] = topic.encode() + b"#"
        results: list[PutResult] = []
        ok = PutStatus.PUT_OK
        crc32 = zlib.crc32  # the index key hash (index.key_hash), inlined
        mf = commitlog.file_for_append(0)
        wpos = mf.wrote_pos
        fsize = mf.size
        # A run: consecutive records copied with one memcpy, then patched one by one.
        run_src = run_dst = run_len = 0
        run_patches: list[tuple[int, int, int]] = []
        view = memoryview(data)
        for item in items:
            if type(item) is tuple:
                start, size, tags_code, keys = item  # type: ignore[misc]
                if wpos + size + 8 > fsize:
                    if run_len:
                        self._flush_run(mf, view, run_src, run_dst, run_len, run_patches, queue_id, store_ts)
                        run_len = 0
                        run_patches = []
                    mf.wrote_pos = wpos
                    mf = commitlog.file_for_append(size)
                    wpos, fsize = mf.wrote_pos, mf.size
                if run_len and start != run_src + run_len:
                    self._flush_run(mf, view, run_src, run_dst, run_len, run_patches, queue_id, store_ts)
                    run_len = 0
                    run_patches = []
                if not run_len:
                    run_src, run_dst = start, wpos
                run_len += size
                phys = mf.file_from + wpos
                run_patches.append((wpos, qoff, phys))
                cq_entries.append(pack_cq(phys, size, tags_code))
                if keys:
                    for k in keys:
                        index_entries.append((crc32(prefix + k), phys))
                results.append(_new_result(PutResult, (ok, qoff, phys, size, store_ts, topic, queue_id, "")))
                qoff += 1
                wpos += size
            elif isinstance(item, _Pending):
                if run_len:
                    self._flush_run(mf, view, run_src, run_dst, run_len, run_patches, queue_id, store_ts)
                    run_len = 0
                    run_patches = []
                mf.wrote_pos = wpos
                results.append(self._append_other(item, store_ts, index_entries))
                mf = commitlog.file_for_append(0)
                wpos, fsize = mf.wrote_pos, mf.size
            else:
                results.append(item)  # a rejection
        if run_len:
            self._flush_run(mf, view, run_src, run_dst, run_len, run_patches, queue_id, store_ts)
        mf.wrote_pos = wpos
        if cq_entries:
            cq.append(b"".join(cq_entries), first_qoff)
        if index_entries:
            self.index.put_many(index_entries, store_ts)
        return results

    def _flush_run(
        self,
        mf: MappedFile,
        view: memoryview,
        src: int,
        dst: int,
        length: int,
        patches: list[tuple[int, int, int]],
        queue_id: int,
        store_ts: int,
    ) -> None:
        if dst + length > mf.reserved:
            mf.reserve(dst + length)
        mm = mf.mm
        mm[dst : dst + length] = view[src : src + length]
        pack_block = BROKER_BLOCK.pack_into
        host = self.store_host
        for wpos, qoff, phys in patches:
            pack_block(mm, wpos + BROKER_BLOCK_OFFSET, queue_id, qoff, phys, store_ts, host)

    def _append_other(self, p: _Pending, store_ts: int, index_entries: list[tuple[int, int]]) -> PutResult:
        """Write one record destined to another queue than the request's (a delayed message)."""
        cq = self.queue_for(p.topic, p.qid)
        qoff = cq.max_offset
        mf = self.commitlog.file_for_append(p.size)
        wpos = mf.wrote_pos
        phys = mf.file_from + wpos
        if wpos + p.size > mf.reserved:
            mf.reserve(wpos + p.size)
        mf.mm[wpos : wpos + p.size] = p.data[p.start : p.start + p.size]
        BROKER_BLOCK.pack_into(mf.mm, wpos + BROKER_BLOCK_OFFSET, p.qid, qoff, phys, store_ts, self.store_host)
        mf.wrote_pos = wpos + p.size
        code = p.tags_code
        if code < 0:
            code = store_ts + self.delay_levels_ms[-code - 1]
        cq.append(CQ_ENTRY.pack(phys, p.size, code), qoff)
        if p.keys:
            prefix = p.topic.encode() + b"#"
            index_entries.extend((key_hash(prefix + k), phys) for k in p.keys)
        return PutResult(PutStatus.PUT_OK, qoff, phys, p.size, store_ts, p.topic, p.qid)


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


__all__ = ["SCHEDULE_TOPIC", "Appender", "count_records", "rejected_results", "tag_hash"]
