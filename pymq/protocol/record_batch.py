"""The broker's side of the record layout: validating a producer's batch, patching the
broker-assigned block, scanning stored records.

Part of the record module (:mod:`pymq.protocol.record` holds the layout itself): these are
the only other functions that read or write record fields by position. The store uses them
on its write path (:func:`split_batch`, :func:`patch_broker_blocks`, for a single send
:func:`store_record` and :func:`property_codes_one`) and in recovery and
replication (:class:`StoredScan`); the broker's put hooks look at properties through
:func:`any_property_contains` without reading bodies.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from itertools import repeat
from typing import NamedTuple

from pymq.errors import ProtocolError
from pymq.protocol import record as _record
from pymq.protocol.record import (
    BLANK_MAGIC,
    BLANK_MARKER,
    BLANK_SIZE,
    BODY_POS,
    BROKER_BLOCK,
    BROKER_BLOCK_OFFSET,
    HEAD,
    MAGIC,
    MAX_PROPERTIES_SIZE,
    MIN_RECORD_SIZE,
    STORED_HEAD,
    U16,
    VALIDATION_HEAD,
    Buffer,
)

#: :func:`split_batch` rejection kinds
REJECT_ILLEGAL = 0
REJECT_PROPERTIES_SIZE = 1


class SplitBatch(NamedTuple):
    """A validated batch: where each valid record starts, its size and where its properties start."""

    positions: list[int]
    sizes: list[int]
    props_ats: list[int]
    #: ``(ordinal in the batch, REJECT_* kind, reason)`` of each refused record
    rejected: list[tuple[int, int, str]]


_new_split = tuple.__new__


def split_batch(data: bytes, topic_field: bytes, max_size: int) -> SplitBatch:
    """Validate a producer's batch for one topic, record by record, in one pass.

    Returns ``(positions, sizes, props_ats, rejected)``: where each valid record starts in
    ``data``, its size and where its properties start; ``rejected`` holds
    ``(ordinal in the batch, REJECT_* kind, reason)`` for the others. A record is valid when
    its header, lengths, topic (``topic_field``, see :func:`topic_field`), size (at most
    ``max_size``), properties size and body CRC check out. A header that cannot be
    trusted ends the batch: the rest cannot be split into records.
    """
    speedups = _record.speedups
    if speedups is not None:
        split = speedups.split_batch(data, topic_field, max_size, _batch_rejection)
        if split is not NotImplemented:
            return _new_split(SplitBatch, split)
    return split_batch_py(data, topic_field, max_size)


def split_batch_py(data: bytes, topic_field: bytes, max_size: int) -> SplitBatch:
    """:func:`split_batch` in pure Python (the reference for the accelerator)."""
    spans: list[int] = []  # pos, size, props_at per valid record, flat: one list operation each
    rejected: list[tuple[int, int, str]] = []
    tlen2 = len(topic_field)
    n = len(data)
    view = memoryview(data)
    unpack_hdr = VALIDATION_HEAD.unpack_from
    unpack_u16 = U16.unpack_from
    startswith = data.startswith
    crc32 = zlib.crc32
    pos = 0
    while pos < n:
        try:
            size, magic, crc, body_len = unpack_hdr(data, pos)
        except struct.error:
            rejected.append(
                (len(spans) // 3 + len(rejected), REJECT_ILLEGAL, f"truncated record at byte {pos} of the batch")
            )
            break
        end = pos + size
        if magic != MAGIC or size < MIN_RECORD_SIZE or end > n:
            # The size cannot be trusted, so the rest of the batch cannot be split.
            rejected.append(
                (len(spans) // 3 + len(rejected), REJECT_ILLEGAL, f"bad record header at byte {pos} of the batch")
            )
            break
        body_end = pos + BODY_POS + body_len
        props_at = body_end + tlen2 + 2
        if (
            body_len < 0
            or props_at > end
            or not startswith(topic_field, body_end)
            or props_at + unpack_u16(data, props_at - 2)[0] != end
            or size > max_size
        ):
            reason = _batch_rejection(data, pos, end, body_end, topic_field, max_size)
            rejected.append((len(spans) // 3 + len(rejected), REJECT_ILLEGAL, reason))
        elif crc32(view[pos + BODY_POS : body_end]) != crc:
            rejected.append((len(spans) // 3 + len(rejected), REJECT_ILLEGAL, "body crc mismatch"))
        elif end - props_at > MAX_PROPERTIES_SIZE:
            rejected.append(
                (
                    len(spans) // 3 + len(rejected),
                    REJECT_PROPERTIES_SIZE,
                    f"properties of {end - props_at} bytes exceed {MAX_PROPERTIES_SIZE}",
                )
            )
        else:
            spans += (pos, size, props_at)
        pos = end
    return SplitBatch(spans[0::3], spans[1::3], spans[2::3], rejected)


def any_property_contains(data: bytes, split: SplitBatch, needle: bytes) -> bool:
    """Whether the properties of any valid record of ``split`` contain ``needle`` (bodies are not searched)."""
    speedups = _record.speedups
    if speedups is not None:
        found = speedups.any_property_contains(data, split[0], split[1], split[2], needle)
        if found is not NotImplemented:
            return found is True
    return any_property_contains_py(data, split, needle)


def any_property_contains_py(data: bytes, split: SplitBatch, needle: bytes) -> bool:
    """:func:`any_property_contains` in pure Python (the reference for the accelerator)."""
    positions, sizes, props_ats = split.positions, split.sizes, split.props_ats
    if len(positions) == 1:  # single sends
        return data.find(needle, props_ats[0], positions[0] + sizes[0]) >= 0
    find = data.find
    for props_at, pos, size in zip(props_ats, positions, sizes, strict=True):
        if find(needle, props_at, pos + size) >= 0:
            return True
    return False


def property_codes(
    data: bytes, positions: list[int], sizes: list[int], props_ats: list[int], phys: list[int], prefix_crc: int
) -> tuple[list[int], list[tuple[int, int]]] | None:
    """The store dispatcher's property rule over a batch, in C; None without the accelerator.

    For each record ``i`` (properties ``data[props_ats[i] : positions[i] + sizes[i]]``): its
    tags code (crc32 of the last ``TAGS`` value, 0 without one), and an index entry
    ``(crc32(key, prefix_crc), phys[i])`` per ``UNIQ_KEY`` value (the last first) and per
    non-empty ``KEYS`` word. :meth:`pymq.broker.store.dispatcher.Dispatcher.codes` is the
    rule's reference (the tests compare the two); it runs where this returns None.
    """
    speedups = _record.speedups
    if speedups is None:
        return None
    codes = speedups.property_codes(data, positions, sizes, props_ats, phys, prefix_crc)
    return None if codes is NotImplemented else codes


def property_codes_one(
    data: bytes, pos: int, size: int, props_at: int, phys: object, prefix_crc: int
) -> tuple[int, list[tuple[int, int]]] | None:
    """:func:`property_codes` of one record (``data[pos : pos + size]``): ``(tags code, index entries)``.

    What a single send needs, without lists around its arguments and its tags code; None
    without the accelerator (then :meth:`~pymq.broker.store.dispatcher.Dispatcher.codes`, the
    rule's reference, runs).
    """
    speedups = _record.speedups
    if speedups is None:
        return None
    codes = speedups.property_codes_one(data, pos, size, props_at, phys, prefix_crc)
    return None if codes is NotImplemented else codes


def _batch_rejection(data: bytes, pos: int, end: int, body_end: int, topic_field: bytes, max_size: int) -> str:
    """Why a record whose lengths or topic do not check out is refused (the slow path)."""
    if body_end < pos + BODY_POS or body_end + 4 > end:
        return "bad body length"
    tl = U16.unpack_from(data, body_end)[0]
    props_at = body_end + 2 + tl
    if props_at + 2 > end:
        return "bad topic length"
    if props_at + 2 + U16.unpack_from(data, props_at)[0] != end:
        return "record lengths do not add up"
    if data[body_end : body_end + 2 + tl] != topic_field:
        return "record topic differs from the request topic"
    return f"message of {end - pos} bytes exceeds the maximum {max_size}"


def patch_broker_blocks(
    buf: Buffer,
    positions: list[int],
    queue_id: int,
    first_queue_offset: int,
    base: int,
    store_timestamp: int,
    store_host: bytes,
) -> None:
    """Write the broker-assigned block of records copied to ``positions`` of ``buf`` (a mapped file).

    Their queue offsets run from ``first_queue_offset``; their physical offsets are
    ``base + position``.
    """
    speedups = _record.speedups
    if speedups is not None and (
        speedups.patch_broker_blocks(buf, positions, queue_id, first_queue_offset, base, store_timestamp, store_host)
        is not NotImplemented
    ):
        return
    patch_broker_blocks_py(buf, positions, queue_id, first_queue_offset, base, store_timestamp, store_host)


def patch_broker_blocks_py(
    buf: Buffer,
    positions: list[int],
    queue_id: int,
    first_queue_offset: int,
    base: int,
    store_timestamp: int,
    store_host: bytes,
) -> None:
    """:func:`patch_broker_blocks` in pure Python: one C-level loop (map) instead of a Python one."""
    if len(positions) == 1:  # single sends
        w = positions[0]
        BROKER_BLOCK.pack_into(
            buf, w + BROKER_BLOCK_OFFSET, queue_id, first_queue_offset, base + w, store_timestamp, store_host
        )
        return
    any(
        map(
            BROKER_BLOCK.pack_into,
            repeat(buf),
            [w + BROKER_BLOCK_OFFSET for w in positions],
            repeat(queue_id),
            range(first_queue_offset, first_queue_offset + len(positions)),
            [base + w for w in positions],
            repeat(store_timestamp),
            repeat(store_host),
        )
    )


def store_record(
    buf: Buffer,
    at: int,
    data: bytes,
    pos: int,
    size: int,
    queue_id: int,
    queue_offset: int,
    base: int,
    store_timestamp: int,
    store_host: bytes,
) -> None:
    """Copy one record (``data[pos : pos + size]``) to ``buf[at:]``, then write its broker block.

    :func:`patch_broker_blocks` of a single send, with the copy before it: the copy lands
    before the block (crash safety, see :class:`StoredScan`); the physical offset is ``base + at``.
    """
    speedups = _record.speedups
    if (
        speedups is None
        or speedups.store_record(buf, at, data, pos, size, queue_id, queue_offset, base, store_timestamp, store_host)
        is NotImplemented
    ):
        store_record_py(buf, at, data, pos, size, queue_id, queue_offset, base, store_timestamp, store_host)


def store_record_py(
    buf: Buffer,
    at: int,
    data: bytes,
    pos: int,
    size: int,
    queue_id: int,
    queue_offset: int,
    base: int,
    store_timestamp: int,
    store_host: bytes,
) -> None:
    """:func:`store_record` in pure Python (the reference for the accelerator)."""
    buf[at : at + size] = data if pos == 0 and size == len(data) else memoryview(data)[pos : pos + size]  # type: ignore[index]
    BROKER_BLOCK.pack_into(
        buf, at + BROKER_BLOCK_OFFSET, queue_id, queue_offset, base + at, store_timestamp, store_host
    )


#: ``(pos, size, topic_at, props_at, queue_id, queue_offset, store_ts)`` of one stored record
StoredRecord = tuple[int, int, int, int, int, int, int]
#: records a :class:`StoredScan` verifies per call (bounds what a scan of a whole file holds at once)
SCAN_BATCH = 4096


class StoredScan:
    """The stored records of one commitlog file region, verified one by one (recovery, replication).

    Iterating yields ``(pos, size, topic_at, props_at, queue_id, queue_offset, store_ts)`` per
    valid record from ``start`` up to ``limit`` (positions in ``buf``; the topic is
    ``buf[topic_at : props_at - 2]``, the properties ``buf[props_at : pos + size]``). A record
    is valid when its magic, size and inner lengths agree, its body CRC matches (if
    ``check_crc``), and its broker block was written: the physical-offset field equals
    ``base + pos`` and the store time is set (the appender copies the producer's bytes first
    and patches the block after, so a crash in between leaves a record whose body checks out
    but whose block does not). Afterwards :attr:`pos` is where the scan stopped and
    :attr:`clean` says whether it stopped at a blank marker or the exact end (True), or at
    something that is not a valid record (False).
    """

    __slots__ = ("base", "buf", "check_crc", "clean", "limit", "pos")

    def __init__(self, buf: Buffer, start: int, limit: int, base: int, check_crc: bool) -> None:
        self.buf = buf
        self.pos = start
        self.limit = limit
        self.base = base
        self.check_crc = check_crc
        self.clean = True

    def blank_size(self) -> int:
        """The size a blank marker at :attr:`pos` announces (0 if there is none)."""
        if self.limit - self.pos < BLANK_SIZE:
            return 0
        free, magic = BLANK_MARKER.unpack_from(self.buf, self.pos)
        return free if magic == BLANK_MAGIC else 0

    def batch(self, max_records: int = SCAN_BATCH) -> list[StoredRecord]:
        """The next records, up to ``max_records`` (fewer: the scan stopped, see :attr:`clean`).

        In C when the accelerator is there (:func:`stored_scan_py` is the reference)."""
        speedups = _record.speedups
        found = (
            NotImplemented
            if speedups is None
            else speedups.stored_scan(self.buf, self.pos, self.limit, self.base, self.check_crc, max_records)
        )
        if found is NotImplemented:
            found = stored_scan_py(self.buf, self.pos, self.limit, self.base, self.check_crc, max_records)
        records, self.pos, self.clean = found
        return records

    def __iter__(self) -> Iterator[StoredRecord]:
        while True:
            records = self.batch()
            yield from records
            if len(records) < SCAN_BATCH:
                return


def stored_scan_py(
    buf: Buffer, start: int, limit: int, base: int, check_crc: bool, max_records: int
) -> tuple[list[StoredRecord], int, bool]:
    """Up to ``max_records`` verified records of ``buf[start:limit]`` (see :class:`StoredScan`),
    where the scan stopped, and whether cleanly (a blank marker, the exact end, or
    ``max_records``). The reference for the accelerator's ``stored_scan``."""
    unpack = STORED_HEAD.unpack_from
    unpack_u16 = U16.unpack_from
    crc32 = zlib.crc32
    records: list[StoredRecord] = []
    pos = start
    valid = True
    with memoryview(buf) as view:
        while pos + BLANK_SIZE <= limit and len(records) < max_records:
            if pos + MIN_RECORD_SIZE > limit:
                # Too little room for a record: only a blank marker can be here.
                valid = HEAD.unpack_from(buf, pos)[1] == BLANK_MAGIC
                break
            size, magic, crc, qid, qoff, phys, store_ts, body_len = unpack(buf, pos)
            if magic != MAGIC:
                valid = magic == BLANK_MAGIC
                break
            end = pos + size
            topic_at = pos + BODY_POS + body_len + 2
            if size < MIN_RECORD_SIZE or end > limit or body_len < 0 or topic_at + 2 > end:
                valid = False
                break
            props_at = topic_at + unpack_u16(buf, topic_at - 2)[0] + 2
            if props_at > end or props_at + unpack_u16(buf, props_at - 2)[0] != end:
                valid = False
                break
            if phys != base + pos or store_ts <= 0:
                valid = False
                break
            if check_crc and crc32(view[pos + BODY_POS : topic_at - 2]) != crc:
                valid = False
                break
            records.append((pos, size, topic_at, props_at, qid, qoff, store_ts))
            pos = end
    return records, pos, valid


def count_records(data: bytes | bytearray | memoryview) -> int:
    """How many records a batch announces (for answering a batch that cannot be stored)."""
    n, pos, count = len(data), 0, 0
    while n - pos >= HEAD.size:
        size, magic = HEAD.unpack_from(data, pos)
        count += 1
        if magic != MAGIC or size < MIN_RECORD_SIZE:
            break
        pos += size
    return max(count, 1)


def whole_records_prefix(buf: Buffer, phys: int, file_size: int) -> int:
    """How many leading bytes of ``buf`` (commitlog bytes from offset ``phys``) are whole pieces.

    A piece is a record (by its size field) or a blank marker together with the rest of its
    file (``file_size`` bytes per commitlog file). A replicating slave appends that prefix and
    keeps the rest until more bytes arrive. Raises :class:`~pymq.errors.ProtocolError` when
    the bytes at a piece's start are neither (the full check is the append's own).
    """
    n = len(buf)
    pos = 0
    unpack = HEAD.unpack_from
    while n - pos >= BLANK_SIZE:
        size, magic = unpack(buf, pos)
        if magic == MAGIC:
            if size < MIN_RECORD_SIZE:
                raise ProtocolError(f"replicated record at {phys + pos} has size {size}")
            if pos + size > n:
                break
            pos += size
        elif magic == BLANK_MAGIC:
            left = file_size - (phys + pos) % file_size
            if pos + left > n:
                break
            pos += left
        else:
            raise ProtocolError(f"replicated bytes at {phys + pos} are neither a record nor a blank marker")
    return pos
