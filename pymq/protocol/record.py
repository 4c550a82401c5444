"""The message record: the one byte layout shared by producers, the commitlog and pull responses.

A producer encodes each message into a record; the broker validates it, patches the
broker-assigned block in place and appends the bytes to the commitlog unchanged; a pull
response carries the same bytes back. Integers are big-endian::

    off  size  field
    0    4     total_size           whole record, this field included
    4    4     magic                0x706D7131 ("pmq1")
    8    4     body_crc             zlib.crc32 of the stored (possibly compressed) body
    12   4     flag                 user flag
    16   4     sys_flag             SYSFLAG_* bits
    20   8     born_timestamp       ms since the epoch, set by the producer
    28   8     born_host            IPv4 (4) + port (u32)
    36   4     reconsume_times
    40   8     prepared_tx_offset
    48   4     queue_id             --- broker-assigned block (patched in one write) ---
    52   8     queue_offset         entry number in the consume queue
    60   8     physical_offset      commitlog offset of this record
    68   8     store_timestamp      ms since the epoch
    76   8     store_host           IPv4 (4) + port (u32)
    84   4     body_len, then body
    ..   2     topic_len, then topic (UTF-8)
    ..   2     properties_len, then properties: key \\x01 value \\x02 ...

Host fields are IPv4 only (an IPv6 peer is recorded as 0.0.0.0 with its port).
The end of a commitlog file that cannot hold the next record carries a blank marker:
``[i32 remaining bytes][u32 BLANK_MAGIC]``.
"""

from __future__ import annotations

import mmap
import socket
import struct
import zlib
from collections.abc import Iterator

from pymq.errors import LocalProtocolError, MessageDecodeError
from pymq.protocol.accelerator import ABI_VERSION, load_speedups

MAGIC = 0x706D7131
BLANK_MAGIC = 0xCBD43194

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TX_PREPARED = 0x4
SYSFLAG_TX_COMMIT = 0x8
SYSFLAG_TX_ROLLBACK = 0xC

PROP_SEPARATOR = b"\x02"
NAME_VALUE_SEPARATOR = b"\x01"

FIXED = struct.Struct(">iIIiiq8siqiqqq8si")
FIXED_SIZE = FIXED.size  # 88, including body_len
assert FIXED_SIZE == 88

#: total_size, magic, body_crc, flag, sys_flag, born_ts, born_host, reconsume, prepared
#: (the producer-owned prefix, up to the broker-assigned block)
BROKER_BLOCK_OFFSET = 48
BROKER_BLOCK = struct.Struct(">iqqq8s")  # queue_id, queue_offset, physical_offset, store_ts, store_host
QUEUE_OFFSET_POS = 52
PHYSICAL_OFFSET_POS = 60
STORE_TIMESTAMP_POS = 68
BODY_LEN_POS = 84
BODY_POS = 88
MIN_RECORD_SIZE = FIXED_SIZE + 2 + 2

QUEUE_ID_POS = 48
HEAD = struct.Struct(">iI")  # total_size, magic
_I32 = struct.Struct(">i")
U16 = struct.Struct(">H")
BLANK_MARKER = struct.Struct(">iI")
_STORE_TS = struct.Struct(">q")
_Q = struct.Struct(">q")
#: total_size, magic, body_crc, (skipped to byte 84), body_len
VALIDATION_HEAD = struct.Struct(">iII72xi")
#: total_size, magic, body_crc, queue_id, queue_offset, physical_offset, store_timestamp, body_len
STORED_HEAD = struct.Struct(">iII36xiqqq8xi")
assert VALIDATION_HEAD.size == STORED_HEAD.size == FIXED_SIZE
#: bytes of the blank marker at the end of a commitlog file
BLANK_SIZE = BLANK_MARKER.size

MAX_PROPERTIES_SIZE = 32767

#: what records are read from and patched in: a bytes-like object or a mapped file
Buffer = bytes | bytearray | memoryview | mmap.mmap

EMPTY_HOST = b"\x00" * 8

# --- the optional C accelerator ---------------------------------------------------------------------------
# pymq._speedups runs the per-record loops of this module and of record_batch in C; it is loaded and
# checked by pymq.protocol.accelerator against the layout below.


def speedups_layout() -> dict[str, int | str]:
    """The layout constants the accelerator must have been built with (its ``LAYOUT``)."""
    return {
        "MAGIC": MAGIC,
        "BLANK_MAGIC": BLANK_MAGIC,
        "FIXED": FIXED.format,
        "BODY_POS": BODY_POS,
        "BODY_LEN_POS": BODY_LEN_POS,
        "MIN_RECORD_SIZE": MIN_RECORD_SIZE,
        "BROKER_BLOCK": BROKER_BLOCK.format,
        "BROKER_BLOCK_OFFSET": BROKER_BLOCK_OFFSET,
        "BLANK_SIZE": BLANK_SIZE,
        "MAX_PROPERTIES_SIZE": MAX_PROPERTIES_SIZE,
        "ABI_VERSION": ABI_VERSION,
    }


#: the accelerator in use, or None (tests swap it out to run the pure-Python bodies)
speedups = load_speedups(speedups_layout())


def pack_host(host: str, port: int) -> bytes:
    """Encode ``host:port`` into the 8-byte host field (IPv4 only; others become 0.0.0.0)."""
    try:
        ip = socket.inet_aton(host)
    except OSError:
        ip = b"\x00\x00\x00\x00"
    return ip + struct.pack(">I", port & 0xFFFFFFFF)


def unpack_host(raw: bytes) -> str:
    return f"{socket.inet_ntoa(raw[:4])}:{struct.unpack('>I', raw[4:8])[0]}"


def blank_marker(free: int) -> bytes:
    return BLANK_MARKER.pack(free, BLANK_MAGIC)


def encode_properties(props: dict[str, str]) -> bytes:
    """``k\\x01v\\x02…``. Keys and values may not contain the two separator bytes."""
    if not props:
        return b""
    parts = []
    for k, v in props.items():
        kb = k.encode()
        vb = str(v).encode()
        if b"\x01" in kb or b"\x02" in kb or b"\x01" in vb or b"\x02" in vb:
            raise LocalProtocolError(f"property {k!r} contains a reserved separator byte")
        parts.append(kb + b"\x01" + vb + b"\x02")
    return b"".join(parts)


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    """Inverse of :func:`encode_properties`; accepts a missing trailing separator."""
    out: dict[str, str] = {}
    if not raw:
        return out
    for item in bytes(raw).split(b"\x02"):
        if not item:
            continue
        k, sep, v = item.partition(b"\x01")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def find_property(props: bytes, key: bytes) -> bytes | None:
    """One property's raw value without decoding the whole map (hot path helper).

    ``key`` must already end with ``\\x01`` (e.g. ``b"TAGS\\x01"``).
    """
    if props.startswith(key):
        start = len(key)
    else:
        i = props.find(b"\x02" + key)
        if i < 0:
            return None
        start = i + 1 + len(key)
    end = props.find(b"\x02", start)
    return props[start:] if end < 0 else props[start:end]


def tag_hash(tag: str | bytes | None) -> int:
    """The consume-queue tags code: crc32 of the tag, 0 when there is none.

    Collisions are harmless: the broker filters on the code, the client re-checks the tag.
    """
    if not tag:
        return 0
    if isinstance(tag, str):
        tag = tag.encode()
    return zlib.crc32(tag)


def encoded_size(body_len: int, topic_len: int, properties_len: int) -> int:
    """The size of a record with a body, topic and properties of these lengths."""
    return FIXED_SIZE + body_len + 2 + topic_len + 2 + properties_len


def encode_record(
    topic: bytes,
    body: bytes,
    properties: bytes,
    *,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = EMPTY_HOST,
    reconsume_times: int = 0,
    prepared_tx_offset: int = 0,
    queue_id: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    store_host: bytes = EMPTY_HOST,
) -> bytes:
    """Encode one record. Producers leave the broker-assigned block at zero."""
    if speedups is not None:
        record = speedups.encode_record(
            topic, body, properties, flag, sys_flag, born_timestamp, born_host, reconsume_times,
            prepared_tx_offset, queue_id, queue_offset, physical_offset, store_timestamp, store_host,
        )  # fmt: skip
        if isinstance(record, bytes):
            return record
    return encode_record_py(
        topic, body, properties, flag=flag, sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
        reconsume_times=reconsume_times, prepared_tx_offset=prepared_tx_offset, queue_id=queue_id,
        queue_offset=queue_offset, physical_offset=physical_offset, store_timestamp=store_timestamp,
        store_host=store_host,
    )  # fmt: skip


def encode_record_py(
    topic: bytes,
    body: bytes,
    properties: bytes,
    *,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = EMPTY_HOST,
    reconsume_times: int = 0,
    prepared_tx_offset: int = 0,
    queue_id: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    store_host: bytes = EMPTY_HOST,
) -> bytes:
    """:func:`encode_record` in pure Python (the reference for the accelerator)."""
    if len(topic) > 0xFFFF:
        raise LocalProtocolError("topic too long")
    if len(properties) > MAX_PROPERTIES_SIZE:
        raise LocalProtocolError(f"properties of {len(properties)} bytes exceed {MAX_PROPERTIES_SIZE}")
    total = FIXED_SIZE + len(body) + 2 + len(topic) + 2 + len(properties)
    head = FIXED.pack(
        total,
        MAGIC,
        zlib.crc32(body),
        flag,
        sys_flag,
        born_timestamp,
        born_host,
        reconsume_times,
        prepared_tx_offset,
        queue_id,
        queue_offset,
        physical_offset,
        store_timestamp,
        store_host,
        len(body),
    )
    return b"".join((head, body, U16.pack(len(topic)), topic, U16.pack(len(properties)), properties))


class RecordFields:
    """The parsed fields of one record, sliced from a buffer without copying the body."""

    __slots__ = (
        "body",
        "body_crc",
        "born_host",
        "born_timestamp",
        "flag",
        "physical_offset",
        "prepared_tx_offset",
        "properties",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_timestamp",
        "sys_flag",
        "topic",
        "total_size",
    )

    total_size: int
    body_crc: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    reconsume_times: int
    prepared_tx_offset: int
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    store_host: bytes
    body: memoryview
    topic: bytes
    properties: bytes


def parse_record(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> RecordFields:
    """Parse and validate the record at ``pos``; raise :class:`MessageDecodeError` if it is not one."""
    n = len(buf)
    if n - pos < MIN_RECORD_SIZE:
        raise MessageDecodeError(f"truncated record at {pos}: {n - pos} bytes left")
    (
        total,
        magic,
        crc,
        flag,
        sys_flag,
        born_ts,
        born_host,
        reconsume,
        prepared,
        queue_id,
        queue_offset,
        physical,
        store_ts,
        store_host,
        body_len,
    ) = FIXED.unpack_from(buf, pos)
    if magic != MAGIC:
        raise MessageDecodeError(f"bad magic {magic:#x} at {pos}")
    if total < MIN_RECORD_SIZE or total > n - pos:
        raise MessageDecodeError(f"bad record size {total} at {pos}")
    end = pos + total
    p = pos + BODY_POS
    if body_len < 0 or p + body_len + 4 > end:
        raise MessageDecodeError(f"bad body length {body_len} at {pos}")
    mv = memoryview(buf)
    body = mv[p : p + body_len]
    p += body_len
    (topic_len,) = U16.unpack_from(buf, p)
    p += 2
    if p + topic_len + 2 > end:
        raise MessageDecodeError(f"bad topic length at {pos}")
    topic = bytes(mv[p : p + topic_len])
    p += topic_len
    (props_len,) = U16.unpack_from(buf, p)
    p += 2
    if p + props_len != end:
        raise MessageDecodeError(f"record lengths do not add up at {pos}")
    if check_crc and zlib.crc32(body) != crc:
        raise MessageDecodeError(f"body crc mismatch at {pos}")
    r = RecordFields()
    r.total_size = total
    r.body_crc = crc
    r.flag = flag
    r.sys_flag = sys_flag
    r.born_timestamp = born_ts
    r.born_host = born_host
    r.reconsume_times = reconsume
    r.prepared_tx_offset = prepared
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.physical_offset = physical
    r.store_timestamp = store_ts
    r.store_host = store_host
    r.body = body
    r.topic = topic
    r.properties = bytes(mv[p:end])
    return r


def reencode(
    r: RecordFields,
    topic: bytes,
    properties: bytes,
    *,
    reconsume_times: int | None = None,
    sys_flag: int | None = None,
    prepared_tx_offset: int | None = None,
) -> bytes:
    """A new producer-side record for another topic and properties; body, flags and born time carry over.

    Used when the broker moves a message: to the schedule topic, from it to the real topic,
    to a retry or dead-letter topic, to and from the transactions' half topic (which sets
    the transaction bits of ``sys_flag`` and ``prepared_tx_offset``).
    """
    return encode_record(
        topic,
        bytes(r.body),
        properties,
        flag=r.flag,
        sys_flag=r.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=r.born_timestamp,
        born_host=r.born_host,
        reconsume_times=r.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_tx_offset=r.prepared_tx_offset if prepared_tx_offset is None else prepared_tx_offset,
    )


def record_store_timestamp(buf: Buffer, pos: int) -> int:
    return int(_STORE_TS.unpack_from(buf, pos + STORE_TIMESTAMP_POS)[0])


def offset_msg_id(store_host: bytes, physical_offset: int) -> str:
    """The broker-side message id: store IPv4 + port + commitlog offset, 32 uppercase hex chars."""
    return (store_host + struct.pack(">q", physical_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """``(store "ip:port", commitlog offset)`` from an offset message id."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageDecodeError(f"not a message id: {msg_id!r}") from exc
    if len(raw) != 16:
        raise MessageDecodeError(f"not a message id: {msg_id!r}")
    return unpack_host(raw[:8]), struct.unpack(">q", raw[8:])[0]


# --- reading records in place (the only code that knows where the fields are) -----------------------------

#: :func:`unpack_record`'s answer, one flat tuple (no object per record):
#: (total_size, body_crc, flag, sys_flag, born_timestamp, born_host, reconsume_times,
#:  prepared_tx_offset, queue_id, queue_offset, physical_offset, store_timestamp, store_host,
#:  body_at, topic_at, props_at, end)
RecordTuple = tuple[int, int, int, int, int, bytes, int, int, int, int, int, int, bytes, int, int, int, int]


def unpack_record(buf: bytes | bytearray | memoryview, pos: int = 0) -> RecordTuple:
    """The fixed fields and slice bounds of the record at ``pos``, its lengths checked.

    The decoders' fast path (no object but the tuple): the body is
    ``buf[body_at : topic_at - 2]``, the topic ``buf[topic_at : props_at - 2]`` and the
    properties ``buf[props_at : end]``. Raises :class:`MessageDecodeError` if it is not a record.
    """
    if speedups is not None:
        fields = speedups.unpack_record(buf, pos)
        if isinstance(fields, tuple):
            return fields
    return unpack_record_py(buf, pos)


def unpack_record_py(buf: bytes | bytearray | memoryview, pos: int = 0) -> RecordTuple:
    """:func:`unpack_record` in pure Python (the reference for the accelerator)."""
    n = len(buf)
    if n - pos < MIN_RECORD_SIZE:
        raise MessageDecodeError(f"truncated record at {pos}: {n - pos} bytes left")
    (
        total, magic, crc, flag, sys_flag, born_ts, born_host, reconsume, prepared,
        queue_id, queue_offset, physical, store_ts, store_host, body_len,
    ) = FIXED.unpack_from(buf, pos)  # fmt: skip
    end = pos + total
    body_at = pos + BODY_POS
    topic_at = body_at + body_len + 2
    if magic != MAGIC or total < MIN_RECORD_SIZE or end > n or body_len < 0 or topic_at + 2 > end:
        raise MessageDecodeError(f"bad record at {pos}")
    props_at = topic_at + U16.unpack_from(buf, topic_at - 2)[0] + 2
    if props_at > end:
        raise MessageDecodeError(f"bad topic length at {pos}")
    if props_at + U16.unpack_from(buf, props_at - 2)[0] != end:
        raise MessageDecodeError(f"record lengths do not add up at {pos}")
    return (
        total, crc, flag, sys_flag, born_ts, born_host, reconsume, prepared,
        queue_id, queue_offset, physical, store_ts, store_host, body_at, topic_at, props_at, end,
    )  # fmt: skip


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[RecordTuple]:
    """:func:`unpack_record` for each of concatenated records (a pull body), until a blank marker or the end.

    A record that is not one raises :class:`MessageDecodeError` after the ones before it were yielded.
    """
    if speedups is not None:
        unpacked = speedups.unpack_records(buf)
        if unpacked is not NotImplemented:
            records, error = unpacked
            yield from records
            if error is not None:
                raise error
            return
    yield from iter_records_py(buf)


def iter_records_py(buf: bytes | bytearray | memoryview) -> Iterator[RecordTuple]:
    """:func:`iter_records` in pure Python (the reference for the accelerator)."""
    pos = 0
    n = len(buf)
    unpack_head = HEAD.unpack_from
    while n - pos >= BLANK_SIZE:
        if unpack_head(buf, pos)[1] == BLANK_MAGIC:
            return
        fields = unpack_record_py(buf, pos)
        yield fields
        pos = fields[16]


def iter_spans(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """``(pos, size)`` of each of concatenated records, reading only the size fields.

    Stops at anything that is not a record's header (a blank marker, a bad magic or size)
    or when less than a header is left; nothing is validated further (the caller parses
    what it needs).
    """
    pos = 0
    n = len(buf)
    unpack_head = HEAD.unpack_from
    while n - pos >= BLANK_SIZE:
        size, magic = unpack_head(buf, pos)
        if magic != MAGIC or size < MIN_RECORD_SIZE:
            return
        yield pos, size
        pos += size


def records_before(buf: bytes | memoryview, end: int) -> bytes | memoryview:
    """The leading records of ``buf`` whose queue offset is below ``end``.

    Only each record's size, magic and queue offset are read, nothing is decoded. Records
    of one pull answer are in queue-offset order, so the cut is a prefix.
    """
    pos, n = 0, len(buf)
    while n - pos >= MIN_RECORD_SIZE:
        total, magic = HEAD.unpack_from(buf, pos)
        if magic != MAGIC or total < MIN_RECORD_SIZE:
            break  # not a record: leave it to the decoder to complain
        if _Q.unpack_from(buf, pos + QUEUE_OFFSET_POS)[0] >= end:
            return buf[:pos]
        pos += total
    return buf


def stored_record_size(buf: Buffer, pos: int, limit: int, phys: int) -> int:
    """The size of the stored record at ``pos`` if one starts there and its physical offset is ``phys``, else 0.

    Only the header and the physical-offset field are read; ``limit`` is where the data ends.
    """
    if pos + MIN_RECORD_SIZE > limit:
        return 0
    size, magic = HEAD.unpack_from(buf, pos)
    if magic != MAGIC or size < MIN_RECORD_SIZE or pos + size > limit:
        return 0
    if _Q.unpack_from(buf, pos + PHYSICAL_OFFSET_POS)[0] != phys:
        return 0
    return int(size)


def is_record_at(buf: Buffer, pos: int) -> bool:
    """Whether a record's magic is at ``pos`` (not a blank marker, not zeros)."""
    return len(buf) - pos >= BLANK_SIZE and HEAD.unpack_from(buf, pos)[1] == MAGIC


def is_blank_marker(buf: Buffer, pos: int = 0) -> bool:
    """Whether a blank marker (the filler at a commitlog file's end) starts at ``pos``."""
    return len(buf) - pos >= BLANK_SIZE and BLANK_MARKER.unpack_from(buf, pos)[1] == BLANK_MAGIC


def topic_field(topic: bytes) -> bytes:
    """The topic as it is stored in a record: u16 length + the name."""
    return U16.pack(len(topic)) + topic
