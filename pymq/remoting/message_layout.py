"""RocketMQ's MessageDecoder record layout (what a 4.x client parses in a PULL_MESSAGE body).

One record, big-endian (IPv4 hosts; the V6 sysFlag bits are not produced here)::

    i32 totalSize, i32 magic (0xDAA320A7), i32 bodyCRC, i32 queueId, i32 flag,
    i64 queueOffset, i64 commitLogOffset, i32 sysFlag, i64 bornTimestamp,
    4B+i32 bornHost, i64 storeTimestamp, 4B+i32 storeHost, i32 reconsumeTimes,
    i64 preparedTransactionOffset, i32+body, u8+topic, i16+properties

Properties are ``name\\x01value\\x02`` repeated. The offsetMsgId is the upper-case hex of
store host IP, port and commit-log offset. Pure Python; a C twin is a later step.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from dataclasses import dataclass, field

from pymq.errors import RemoteProtocolError
from pymq.protocol import record

__all__ = [
    "MESSAGE_MAGIC_CODE",
    "MessageExt",
    "decode_messages",
    "encode_message",
    "from_stored_records",
    "offset_msg_id",
    "parse_properties",
    "properties_string",
]

MESSAGE_MAGIC_CODE = -626843481
_NAME_VALUE_SEP = "\x01"
_PROPERTY_SEP = "\x02"
_HEAD = struct.Struct(">iiiiiqqiq")  # size, magic, crc, qid, flag, qoff, phys, sysflag, born ts
_HOST = struct.Struct(">4si")


@dataclass(slots=True)
class MessageExt:
    """A stored message as MessageDecoder sees it."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)


def properties_string(props: dict[str, str]) -> str:
    """``name\\x01value\\x02`` for each property, as messageProperties2String writes it."""
    return "".join(f"{k}{_NAME_VALUE_SEP}{v}{_PROPERTY_SEP}" for k, v in props.items())


def parse_properties(text: str | None) -> dict[str, str]:
    """The inverse of :func:`properties_string` (entries without a separator are dropped)."""
    out: dict[str, str] = {}
    for item in (text or "").split(_PROPERTY_SEP):
        name, sep, value = item.partition(_NAME_VALUE_SEP)
        if sep and name:
            out[name] = value
    return out


@functools.lru_cache(maxsize=1024)
def _pack_host(host: tuple[str, int]) -> bytes:
    ip = ipaddress.ip_address(host[0])
    if ip.version != 4:
        raise ValueError(f"only IPv4 hosts are encoded, got {host[0]}")
    return _HOST.pack(ip.packed, host[1])


def offset_msg_id(store_host: tuple[str, int], commit_log_offset: int) -> str:
    """The offsetMsgId a 4.x client derives: hex(IP, port, commit-log offset), upper case."""
    return (_pack_host(store_host) + struct.pack(">q", commit_log_offset)).hex().upper()


def body_crc(body: bytes) -> int:
    """UtilAll.crc32: CRC32 masked to a non-negative int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_message(m: MessageExt) -> bytes:
    """One record in MessageDecoder's layout."""
    topic = m.topic.encode()
    props = properties_string(m.properties).encode()
    if len(topic) > 127:
        raise ValueError(f"topic of {len(topic)} bytes exceeds 127")
    if len(props) > 32767:
        raise ValueError(f"properties of {len(props)} bytes exceed 32767")
    size = _HEAD.size + 8 + 8 + 8 + 4 + 8 + 4 + len(m.body) + 1 + len(topic) + 2 + len(props)
    return b"".join(
        (
            _HEAD.pack(
                size,
                MESSAGE_MAGIC_CODE,
                body_crc(m.body),
                m.queue_id,
                m.flag,
                m.queue_offset,
                m.commit_log_offset,
                m.sys_flag,
                m.born_timestamp,
            ),
            _pack_host(m.born_host),
            struct.pack(">q", m.store_timestamp),
            _pack_host(m.store_host),
            struct.pack(">iqi", m.reconsume_times, m.prepared_transaction_offset, len(m.body)),
            m.body,
            struct.pack(">B", len(topic)),
            topic,
            struct.pack(">h", len(props)),
            props,
        )
    )


def _host(buf: bytes, pos: int) -> tuple[str, int]:
    raw, port = _HOST.unpack_from(buf, pos)
    return str(ipaddress.IPv4Address(raw)), port


def decode_messages(buf: bytes) -> list[MessageExt]:
    """Records back from a PULL body (IPv4 only); raises RemoteProtocolError when truncated."""
    out: list[MessageExt] = []
    pos = 0
    try:
        while pos < len(buf):
            size, magic, _crc, qid, flag, qoff, phys, sysflag, born = _HEAD.unpack_from(buf, pos)
            if magic != MESSAGE_MAGIC_CODE or size <= 0 or pos + size > len(buf):
                raise RemoteProtocolError(f"record at {pos}: bad magic or size {size}")
            p = pos + _HEAD.size
            born_host = _host(buf, p)
            (store_ts,) = struct.unpack_from(">q", buf, p + 8)
            store_host = _host(buf, p + 16)
            reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, p + 24)
            p += 40
            body = bytes(buf[p : p + body_len])
            p += body_len
            tlen = buf[p]
            topic = bytes(buf[p + 1 : p + 1 + tlen]).decode()
            p += 1 + tlen
            (plen,) = struct.unpack_from(">h", buf, p)
            props = parse_properties(bytes(buf[p + 2 : p + 2 + plen]).decode())
            if p + 2 + plen != pos + size:
                raise RemoteProtocolError(f"record at {pos}: fields do not add up to size {size}")
            out.append(
                MessageExt(
                    topic=topic,
                    body=body,
                    queue_id=qid,
                    flag=flag,
                    queue_offset=qoff,
                    commit_log_offset=phys,
                    sys_flag=sysflag,
                    born_timestamp=born,
                    born_host=born_host,
                    store_timestamp=store_ts,
                    store_host=store_host,
                    reconsume_times=reconsume,
                    prepared_transaction_offset=prepared,
                    properties=props,
                )
            )
            pos += size
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise RemoteProtocolError(f"record at {pos}: truncated or corrupt ({e})") from None
    return out


#: MessageDecoder's fixed part up to the body: size, magic, crc, qid, flag, qoff, phys, sysflag,
#: born ts, born host (8), store ts, store host (8), reconsume, prepared, body length
_STORED_HEAD = struct.Struct(">iiiiiqqiq8sq8siqi")


def from_stored_records(buf: bytes | bytearray | memoryview) -> bytes:
    """pymq's stored records (a pull body: :mod:`pymq.protocol.record`'s layout) in MessageDecoder's layout.

    Field by field, no object per message: the hosts are the same 8 bytes in both layouts, the
    sysFlag bits agree (compressed 0x1, multi-tags 0x2, transaction 0x4/0x8/0xC), the body CRC is
    masked to 31 bits as UtilAll.crc32 does, and the topic length shrinks to RocketMQ's one byte
    (a longer topic is refused: RocketMQ allows 127). Raises MessageDecodeError for a bad record.
    The C accelerator does it when it is built (its twin, tested byte for byte); this body is the reference.
    """
    accel = record.speedups
    if accel is not None:
        converted = accel.stored_to_message_decoder(buf)
        if converted is not NotImplemented:
            return converted  # type: ignore[no-any-return]
    return from_stored_records_py(buf)


def from_stored_records_py(buf: bytes | bytearray | memoryview) -> bytes:
    """:func:`from_stored_records` in pure Python (the reference for the accelerator)."""
    out: list[bytes | memoryview] = []
    view = memoryview(buf)
    pack = _STORED_HEAD.pack
    for (
        _total, crc, flag, sys_flag, born_ts, born_host, reconsume, prepared,
        queue_id, queue_offset, physical, store_ts, store_host, body_at, topic_at, props_at, end,
    ) in record.iter_records_py(buf):  # fmt: skip
        body_len = topic_at - 2 - body_at
        topic_len = props_at - 2 - topic_at
        props_len = end - props_at
        if topic_len > 127:
            raise ValueError(f"topic of {topic_len} bytes exceeds RocketMQ's 127")
        size = _STORED_HEAD.size + body_len + 1 + topic_len + 2 + props_len
        out.append(
            pack(
                size,
                MESSAGE_MAGIC_CODE,
                crc & 0x7FFFFFFF,
                queue_id,
                flag,
                queue_offset,
                physical,
                sys_flag,
                born_ts,
                born_host,
                store_ts,
                store_host,
                reconsume,
                prepared,
                body_len,
            )
        )
        out.append(view[body_at : body_at + body_len])
        out.append(bytes((topic_len,)))
        out.append(view[topic_at:props_at])  # the topic, then the u16 properties length (i16 here: < 32768)
        out.append(view[props_at:end])
    return b"".join(out)
