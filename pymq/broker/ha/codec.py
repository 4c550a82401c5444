"""The HA link's frames (sans-IO: bytes in, frames out; no sockets here).

Every frame is ``[u32 length][u8 kind][body]`` (big-endian; ``length`` counts kind and
body). A slave opens with HELLO and then sends ACKs; the master answers HELLO with JOIN
and then sends DATA::

    HELLO  slave -> master  u64 max offset | u16 broker id | u32 tail size | u32 tail CRC
                            | u32 n | n x entry | u16 len + UTF-8 slave address
    JOIN   master -> slave  u8 action (0 stream, 1 truncate, 2 refuse) | u64 offset
                            | u64 commitlog file size | u32 n | n x entry | u16 len + UTF-8 reason

An epoch entry is ``u64 epoch | u64 start offset | u64 term id``; the tail CRC covers the
``tail size`` bytes before the slave's max offset (see :mod:`pymq.broker.ha.epochs`).
    DATA   master -> slave  u64 offset | u64 master max offset | u8 flags | commitlog bytes (none: heartbeat)
    ACK    slave -> master  u64 offset the slave holds (everything below it is in its commitlog)
    AUTH   slave -> master  UTF-8 JSON object: the ACL signing fields of the HELLO that follows

AUTH comes first when the slave has ACL credentials: its fields sign a request of code
HA_PULL_COMMITLOG whose body is the next HELLO's body (:mod:`pymq.broker.ha.auth`), so a
master with ACL on checks the slave's account (an admin one) as it checks any request.

DATA flag ``ACK_NOW`` (a SYNC_MASTER, whose sends wait for ACKs): ACK as soon as the bytes
are stored; without it a slave ACKs at most every :data:`LAZY_ACK_SECONDS` (and on each
heartbeat), which spares an ASYNC_MASTER one ACK to read per small write.

DATA bytes are the master's commitlog as it is on disk, sent from slices of the mapped
files; a frame may end inside a record (the slave keeps the partial record until the
rest arrives). The encoder returns headers only, so the bytes themselves are never copied
into a frame.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from pymq.broker.ha.epoch_file import EpochEntry
from pymq.errors import ProtocolError

HELLO = 1
JOIN = 2
DATA = 3
ACK = 4
AUTH = 5

_HEAD = struct.Struct(">IB")
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ENTRY = struct.Struct(">QQQ")
_HELLO = struct.Struct(">QHIII")
_JOIN = struct.Struct(">BQQI")
_DATA = struct.Struct(">QQB")
#: DATA flag: the master waits for ACKs (SYNC_MASTER)
ACK_NOW = 1
#: without ACK_NOW, a slave ACKs at most this often (and on each heartbeat)
LAZY_ACK_SECONDS = 0.05
DATA_HEADER_SIZE = _HEAD.size + _DATA.size
#: ``[u32 length][u8 kind]`` before every frame's body
FRAME_HEADER_SIZE = _HEAD.size
#: an AUTH body is a few short fields
MAX_AUTH_BODY = 4096
#: no control frame is bigger; DATA frames are bounded by the master's batch size
MAX_FRAME = 64 * 1024 * 1024

ACTIONS = ("stream", "truncate", "refuse")


@dataclass(frozen=True, slots=True)
class Hello:
    max_offset: int
    broker_id: int
    epochs: list[EpochEntry]
    address: str
    tail_size: int = 0
    tail_crc: int = 0


@dataclass(frozen=True, slots=True)
class Join:
    action: str
    offset: int
    file_size: int
    epochs: list[EpochEntry]
    reason: str


def _frame(kind: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body) + 1, kind) + body


def _entries(entries: list[EpochEntry]) -> bytes:
    return b"".join(_ENTRY.pack(e.epoch, e.start_offset, e.term_id) for e in entries)


def _text(s: str) -> bytes:
    raw = s.encode()[:65535]
    return _U16.pack(len(raw)) + raw


def encode_auth(fields: dict[str, object]) -> bytes:
    """AUTH: the signing fields (strings and ints) as a JSON object."""
    return _frame(AUTH, json.dumps(fields, separators=(",", ":"), sort_keys=True).encode())


def decode_auth(body: memoryview) -> dict[str, str | int]:
    """The signing fields of an AUTH frame; ProtocolError if it is not a small object of strings and ints."""
    if len(body) > MAX_AUTH_BODY:
        raise ProtocolError("HA AUTH too long")
    try:
        fields = json.loads(bytes(body))
    except ValueError as exc:
        raise ProtocolError(f"HA AUTH is not JSON: {exc}") from exc
    if not isinstance(fields, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int) and not isinstance(v, bool) for k, v in fields.items()
    ):
        raise ProtocolError("HA AUTH must be an object of strings and integers")
    return fields


def encode_hello(h: Hello) -> bytes:
    head = _HELLO.pack(h.max_offset, h.broker_id, h.tail_size, h.tail_crc, len(h.epochs))
    return _frame(HELLO, head + _entries(h.epochs) + _text(h.address))


def encode_join(j: Join) -> bytes:
    head = _JOIN.pack(ACTIONS.index(j.action), j.offset, j.file_size, len(j.epochs))
    return _frame(JOIN, head + _entries(j.epochs) + _text(j.reason))


def data_header(offset: int, master_max: int, size: int, flags: int = 0) -> bytes:
    """The header of a DATA frame carrying ``size`` bytes from ``offset`` (the bytes follow as they are)."""
    return _HEAD.pack(size + 1 + _DATA.size, DATA) + _DATA.pack(offset, master_max, flags)


def encode_ack(offset: int) -> bytes:
    return _frame(ACK, _U64.pack(offset))


def _read_entries(body: memoryview, at: int, n: int) -> tuple[list[EpochEntry], int]:
    end = at + n * _ENTRY.size
    if end > len(body):
        raise ProtocolError("HA frame too short for its epoch entries")
    return [EpochEntry(*_ENTRY.unpack_from(body, at + i * _ENTRY.size)) for i in range(n)], end


def _read_text(body: memoryview, at: int) -> str:
    if at + 2 > len(body):
        raise ProtocolError("HA frame too short for its text")
    n = _U16.unpack_from(body, at)[0]
    if at + 2 + n != len(body):
        raise ProtocolError("HA frame text length does not match the frame")
    return bytes(body[at + 2 : at + 2 + n]).decode(errors="replace")


def decode_hello(body: memoryview) -> Hello:
    if len(body) < _HELLO.size:
        raise ProtocolError("HA HELLO too short")
    max_offset, broker_id, tail_size, tail_crc, n = _HELLO.unpack_from(body, 0)
    epochs, at = _read_entries(body, _HELLO.size, n)
    return Hello(max_offset, broker_id, epochs, _read_text(body, at), tail_size, tail_crc)


def decode_join(body: memoryview) -> Join:
    if len(body) < _JOIN.size:
        raise ProtocolError("HA JOIN too short")
    action, offset, file_size, n = _JOIN.unpack_from(body, 0)
    if action >= len(ACTIONS):
        raise ProtocolError(f"HA JOIN with unknown action {action}")
    epochs, at = _read_entries(body, _JOIN.size, n)
    return Join(ACTIONS[action], offset, file_size, epochs, _read_text(body, at))


def decode_data(body: memoryview) -> tuple[int, int, int, memoryview]:
    """``(offset, master max offset, flags, bytes)`` of a DATA frame's body."""
    if len(body) < _DATA.size:
        raise ProtocolError("HA DATA too short")
    offset, master_max, flags = _DATA.unpack_from(body, 0)
    return offset, master_max, flags, body[_DATA.size :]


def decode_ack(body: memoryview) -> int:
    if len(body) != _U64.size:
        raise ProtocolError("HA ACK must hold one u64")
    return int(_U64.unpack_from(body, 0)[0])


class FrameDecoder:
    """Feed received bytes, take the whole frames as ``(kind, body)`` (bodies are copies: keep them freely)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, memoryview]]:
        buf = self.buf
        buf += data
        out: list[tuple[int, memoryview]] = []
        n = len(buf)
        pos = 0
        with memoryview(buf) as view:
            while n - pos >= _HEAD.size:
                length, kind = _HEAD.unpack_from(view, pos)
                if length < 1 or length > self.max_frame:
                    raise ProtocolError(f"HA frame length {length} out of range")
                end = pos + 4 + length
                if end > n:
                    break
                out.append((kind, memoryview(bytes(view[pos + _HEAD.size : end]))))
                pos = end
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self.buf)
