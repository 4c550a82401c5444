"""After the commitlog: what a stored record adds to its consume queue and to the index.

Every path that puts records in the commitlog ends here — the producers' batches
(:meth:`Dispatcher.dispatch`), recovery's re-dispatch and a slave's replicated bytes
(:meth:`Dispatcher.dispatch_stored`) — so the two rules below exist once:

* **Consume-queue entry**: ``(commitlog offset, size, tags code)``; the tags code is the
  crc32 of the ``TAGS`` property (0 without one, the last one if there are several). A
  topic may have its own tags-code rule, registered with :meth:`Dispatcher.set_tags_rule`
  by whoever gives the topic its meaning: the broker's delay hook makes the schedule
  topic's code the delivery time. The store itself knows no such topic.
* **Index entries**: one per ``UNIQ_KEY`` (first) and per space-separated ``KEYS`` word,
  hashed as ``crc32(b"<topic>#<key>")`` (:func:`pymq.broker.store.index.key_hash`); empty
  keys are not indexed.

Properties are read from the record bytes; where they sit is :mod:`pymq.protocol.record`'s.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

from pymq.broker.store.consume_queue import CQ_ENTRY
from pymq.errors import StoreError
from pymq.logs import RateLimitedLog, get_logger
from pymq.protocol import record as _record
from pymq.protocol.record_batch import property_codes, property_codes_one

if TYPE_CHECKING:
    from pymq.broker.store.commitlog import StoredRun
    from pymq.broker.store.consume_queue import ConsumeQueue
    from pymq.broker.store.index import IndexService
    from pymq.protocol.record_batch import StoredRecord

log = get_logger("broker.store")
_limited = RateLimitedLog(log)

#: ``rule(properties, store_ts) -> tags code`` for one topic's consume-queue entries
TagsRule = Callable[[bytes, int], int]

_TAGS = b"TAGS\x01"
_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY\x01"
_CQ_PACKERS: dict[int, struct.Struct] = {}


# The C accelerator (pymq._speedups, loaded by protocol/accelerator.py; record.speedups) packs a batch's entries
# (cq_entries); it must have been built for this entry layout.
if _record.speedups is not None and {"ENTRY": CQ_ENTRY.format, "ENTRY_SIZE": CQ_ENTRY.size} != (
    _record.speedups.CQ_LAYOUT
):
    raise ImportError("pymq._speedups was built for another consume-queue layout: rebuild it (pip install -e .)")


def pack_entries(phys: list[int], sizes: list[int], tags_codes: list[int]) -> bytes:
    """Consume-queue entries ``(phys[i], sizes[i], tags_codes[i])``, packed back to back."""
    speedups = _record.speedups
    if speedups is not None:
        packed = speedups.cq_entries(phys, sizes, tags_codes)
        if packed is not NotImplemented:
            return packed  # type: ignore[no-any-return]
    return pack_entries_py(phys, sizes, tags_codes)


def pack_entries_py(phys: list[int], sizes: list[int], tags_codes: list[int]) -> bytes:
    """:func:`pack_entries` in pure Python (the reference for the accelerator)."""
    flat = chain.from_iterable(zip(phys, sizes, tags_codes, strict=True))
    return _cq_packer(len(tags_codes)).pack(*flat)


def _cq_packer(count: int) -> struct.Struct:
    """A ``struct`` packing ``count`` consume-queue entries from one flat argument list."""
    s = _CQ_PACKERS.get(count)
    if s is None:
        s = struct.Struct(">" + "qiq" * count)
        if count <= 256:
            _CQ_PACKERS[count] = s
    return s


class Dispatcher:
    """Builds consume-queue and index entries for records already in the commitlog."""

    def __init__(self, queue_for: Callable[[str, int], ConsumeQueue], index: IndexService) -> None:
        self.queue_for = queue_for
        self.index = index
        #: topic -> its own tags-code rule
        self.tags_rules: dict[str, TagsRule] = {}
        #: b"TAGS\x01<tag>" -> tags code (a bounded cache: tags repeat)
        self._tag_codes: dict[bytes, int] = {}
        #: topic -> crc32(b"topic#"), the index key prefix's crc (index hashes continue it)
        self._prefix_crcs: dict[str, int] = {}
        #: a stored record's raw topic -> (topic, its prefix CRC, or -1: it has its own tags rule)
        self._stored_topics: dict[bytes, tuple[str, int]] = {}

    def set_tags_rule(self, topic: str, rule: TagsRule) -> None:
        """Let ``rule(properties, store_ts)`` give the tags code of ``topic``'s entries (register before start)."""
        self.tags_rules[topic] = rule
        self._stored_topics.clear()  # (the topic's -1 there: its records take scan_stored_py's way)

    def _prefix_crc(self, topic: str) -> int:
        prefix_crc = self._prefix_crcs.get(topic)
        if prefix_crc is None:
            prefix_crc = self._prefix_crcs[topic] = zlib.crc32(topic.encode() + b"#")
        return prefix_crc

    # --- the rules ------------------------------------------------------------------------------------------

    def codes(self, props: bytes) -> tuple[int, list[bytes] | None]:
        """``(tags code, index keys with the unique key first)`` of a record's properties."""
        if not props:
            return 0, None
        items = props.split(b"\x02")
        # Fast path for what producers send: UNIQ_KEY, then TAGS, nothing else.
        if len(items) == 3 and not items[2] and items[0][:9] == _UNIQ and items[1][:5] == _TAGS:
            code = self._tag_codes.get(items[1])
            if code is None:
                if len(self._tag_codes) >= 4096:
                    self._tag_codes.clear()
                code = self._tag_codes[items[1]] = zlib.crc32(items[1][5:])
            uniq = items[0][9:]
            return code, [uniq] if uniq else None
        tags_code = 0
        keys: list[bytes] | None = None
        # One pass, dispatching on the first byte of each key.
        for item in items:
            if not item:
                continue
            c = item[0]
            if c == 85 and item.startswith(_UNIQ):  # U
                if len(item) > 9:
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
        return tags_code, keys

    def tags_code(self, topic: str, props: bytes, store_ts: int) -> int:
        """The consume-queue tags code of a record of ``topic``."""
        rule = self.tags_rules.get(topic)
        return rule(props, store_ts) if rule is not None else self.codes(props)[0]

    def index_hashes(self, topic: str, props: bytes) -> list[int]:
        """The index hashes of a record of ``topic`` (unique key first)."""
        keys = self.codes(props)[1]
        if not keys:
            return []
        prefix_crc = self._prefix_crc(topic)
        return [zlib.crc32(k, prefix_crc) for k in keys]

    # --- dispatching ----------------------------------------------------------------------------------------

    def dispatch(
        self,
        topic: str,
        cq: ConsumeQueue,
        first_queue_offset: int,
        data: bytes,
        positions: Sequence[int],
        sizes: Sequence[int],
        props_ats: Sequence[int],
        phys: Sequence[int],
        store_ts: int,
    ) -> None:
        """Entries for records just copied from ``data`` to one queue, in one write each.

        Record ``i`` sits at ``data[positions[i] : positions[i] + sizes[i]]`` with its
        properties from ``props_ats[i]``; it was stored at ``phys[i]`` with queue offset
        ``first_queue_offset + i`` of ``cq`` (the topic's queue, which the caller holds). A
        consume-queue file that cannot be created raises :class:`StoreError` (the caller
        undoes the batch); an index failure is only logged: the records stay consumable,
        lookups by key miss them.
        """
        if len(phys) == 1:  # one record stored of a batch with refusals
            self.dispatch_one(
                topic, cq, first_queue_offset, data, positions[0], sizes[0], props_ats[0], phys[0], store_ts
            )
            return
        rule = self.tags_rules.get(topic)
        crc32 = zlib.crc32
        prefix_crc = self._prefix_crc(topic)
        if rule is None:
            # The accelerator's copy of codes() for the whole batch (None without it).
            fast = property_codes(data, positions, sizes, props_ats, phys, prefix_crc)  # type: ignore[arg-type]
            if fast is not None:
                tags_codes, hashed = fast
                if tags_codes:
                    cq.append(pack_entries(phys, sizes, tags_codes), first_queue_offset)  # type: ignore[arg-type]
                if hashed:
                    self.put_index(hashed, store_ts)
                return
        codes = self.codes
        cq_vals: list[int] = []  # phys, size, tags code per record, flat
        index_entries: list[tuple[int, int]] = []
        add_index = index_entries.append
        for at, pos, size, props_at in zip(phys, positions, sizes, props_ats, strict=True):
            props = data[props_at : pos + size]
            tags_code, keys = codes(props)
            if rule is not None:
                tags_code = rule(props, store_ts)
            cq_vals += (at, size, tags_code)
            if keys:
                for k in keys:
                    add_index((crc32(k, prefix_crc), at))
        if cq_vals:
            cq.append(_cq_packer(len(cq_vals) // 3).pack(*cq_vals), first_queue_offset)
        if index_entries:
            self.put_index(index_entries, store_ts)

    def dispatch_one(
        self,
        topic: str,
        cq: ConsumeQueue,
        queue_offset: int,
        data: bytes,
        pos: int,
        size: int,
        props_at: int,
        phys: int,
        store_ts: int,
    ) -> None:
        """:meth:`dispatch` of one record (every single send): the same entries, fewer steps; part of
        the single send's fast path (see ``Appender.put_single``).

        ``queue_offset`` is normally the queue's end (:attr:`ConsumeQueue.max_offset`, read
        under the store lock); any other offset takes :meth:`ConsumeQueue.append`'s way.
        """
        rule = self.tags_rules.get(topic)
        prefix_crc = self._prefix_crcs.get(topic)
        if prefix_crc is None:
            prefix_crc = self._prefix_crc(topic)
        if rule is None:
            # The accelerator's copy of codes() (None without it).
            fast = property_codes_one(data, pos, size, props_at, phys, prefix_crc)
            if fast is not None:
                tags_code, hashed = fast
                cq.append_next(CQ_ENTRY.pack(phys, size, tags_code), queue_offset)
                if hashed:
                    self.put_index(hashed, store_ts)
                return
        props = data[props_at : pos + size]
        tags_code, keys = self.codes(props)
        if rule is not None:
            tags_code = rule(props, store_ts)
        cq.append_next(CQ_ENTRY.pack(phys, size, tags_code), queue_offset)
        if keys:
            crc32 = zlib.crc32
            self.put_index([(crc32(k, prefix_crc), phys) for k in keys], store_ts)

    def put_index(self, entries: list[tuple[int, int]], store_ts: int) -> None:
        try:
            self.index.put_many(entries, store_ts)
        except StoreError as exc:
            # The records are stored and consumable; only lookups by key will miss them.
            # Rate-limited: on a full disk this would repeat for every batch.
            _limited.log("error", "index_append_failed", entries=len(entries), reason=str(exc))

    def dispatch_stored(self, stored: Sequence[StoredRun]) -> set[tuple[str, int]]:
        """Entries for records already in the commitlog (a slave's replicated bytes); returns the queues touched.

        ``stored`` is what :meth:`pymq.broker.store.commitlog.CommitLog.append_raw` answered.
        Entries for queue offsets a queue already has are skipped (:meth:`ConsumeQueue.append`).
        A queue's consecutive entries of one file's records go in one write, and index entries of
        one store time in one put (the master wrote them so): a slave's cost per record is one
        codes lookup and one packed entry, not a write of each (:meth:`scan_stored`).
        """
        touched: set[tuple[str, int]] = set()
        for mf, delta, records in stored:
            if not records:
                continue
            runs, index = self.scan_stored(mf.mm, delta, mf.file_from + delta, records)
            for topic, qid, first, entries in runs:
                self.queue_for(topic, qid).append(entries, first)
                touched.add((topic, qid))
            for store_ts, hashed in index:
                self.put_index(hashed, store_ts)
        return touched

    def scan_stored(
        self, buf: Any, delta: int, base: int, records: list[StoredRecord]
    ) -> tuple[list[tuple[str, int, int, bytes]], list[tuple[int, list[tuple[int, int]]]]]:
        """What stored records add (``records``: :func:`~pymq.protocol.record_batch.stored_scan`'s,
        positions counted from ``buf[delta]``, whose physical offset is ``base``).

        Returns ``(runs, index)``: ``(topic, queue id, first queue offset, packed entries)`` per run
        of consecutive offsets of one queue, and ``(store time, [(hash, phys), ...])`` per run of
        records of one store time that have index keys. The accelerator's copy when it has every
        topic (and none has its own tags rule), else :meth:`scan_stored_py`.
        """
        speedups = _record.speedups  # (read per call, as pack_entries does: PYMQ_NO_SPEEDUPS and tests switch it)
        if speedups is not None:
            fast = speedups.dispatch_scan(buf, delta, base, records, self._stored_topics)
            if fast is not NotImplemented:
                return fast  # type: ignore[no-any-return]
        return self.scan_stored_py(buf, delta, base, records)

    def scan_stored_py(
        self, buf: Any, delta: int, base: int, records: list[StoredRecord]
    ) -> tuple[list[tuple[str, int, int, bytes]], list[tuple[int, list[tuple[int, int]]]]]:
        """:meth:`scan_stored` in Python (the reference for the accelerator's; it also learns the topics)."""
        #: raw topic -> (topic, its index keys' prefix CRC, or -1: the topic has its own tags rule)
        topics = self._stored_topics
        #: (topic, queue id) -> [first queue offset, next queue offset, packed entries]
        open_runs: dict[tuple[str, int], list[Any]] = {}
        runs: list[tuple[str, int, int, bytes]] = []
        index: list[tuple[int, list[tuple[int, int]]]] = []
        index_entries: list[tuple[int, int]] = []
        index_ts = 0
        rules = self.tags_rules
        pack = CQ_ENTRY.pack
        for pos, size, topic_at, props_at, qid, qoff, store_ts in records:
            raw = bytes(buf[delta + topic_at : delta + props_at - 2])
            known = topics.get(raw)
            if known is None:
                name = raw.decode(errors="replace")
                known = topics[raw] = (name, -1 if name in rules else self._prefix_crc(name))
            topic, prefix_crc = known
            phys = base + pos
            props = bytes(buf[delta + props_at : delta + pos + size])
            # (the accelerator reads bytes, not the mapping: the properties alone, as one "record")
            fast = property_codes_one(props, 0, len(props), 0, phys, prefix_crc) if prefix_crc >= 0 else None
            if fast is not None:
                tags_code, hashed = fast
            else:
                tags_code = self.tags_code(topic, props, store_ts)
                hashed = [(h, phys) for h in self.index_hashes(topic, props)]
            key = (topic, qid)
            run = open_runs.get(key)
            if run is not None and run[1] == qoff:
                run[2] += pack(phys, size, tags_code)
                run[1] = qoff + 1
            else:
                if run is not None:
                    runs.append((topic, qid, run[0], bytes(run[2])))
                open_runs[key] = [qoff, qoff + 1, bytearray(pack(phys, size, tags_code))]
            if hashed:
                if index_entries and store_ts != index_ts:
                    index.append((index_ts, index_entries))
                    index_entries = []
                index_entries += hashed
                index_ts = store_ts
        runs += [(topic, qid, first, bytes(entries)) for (topic, qid), (first, _, entries) in open_runs.items()]
        if index_entries:
            index.append((index_ts, index_entries))
        return runs, index
