"""The frame codec (sans-IO: bytes in, commands out) for the envelope in :mod:`pymq.protocol.command`.

Frame layout, all integers big-endian::

    0   u32  frame_len    bytes that follow this field: 4 + header_len + body_len
    4   u32  header_len
    8   header            msgpack array [code, opaque, flags, remark, ext]
    8+h body              raw bytes (message payloads never pass through msgpack)

``flags`` bit 0 marks a response, bit 1 a oneway request. ``ext`` is a map of named
header fields (str -> msgpack value); a response echoes the request's ``opaque``.

Request handlers only ever see :class:`Command` objects, never frames, so another wire
format (e.g. RocketMQ's own) can feed the same handlers through its own codec:
:class:`FrameCodec` is what the transport's ``Codec`` seam asks of one.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from pymq.errors import FrameTooLargeError, LocalProtocolError, RemoteProtocolError
from pymq.protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, Body, Buffer, Command

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "Body",
    "Buffer",
    "Command",
    "FrameCodec",
    "FrameDecoder",
    "encode",
    "encode_bytes",
]

#: Largest message body (4 MiB) times a batch, plus headroom for headers.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024 + 1024 * 1024

_PREFIX = struct.Struct(">II")
_PREFIX_SIZE = _PREFIX.size
_pack_prefix = _PREFIX.pack
_unpack_prefix_from = _PREFIX.unpack_from
_unpackb = msgpack.unpackb


def _body_parts(body: Body) -> tuple[list[Buffer], int]:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return ([body] if len(body) else []), len(body)
    parts = [p for p in body if len(p)]
    return parts, sum(len(p) for p in parts)


def encode(cmd: Command) -> list[Buffer]:
    """Encode a command into buffers to be written in order (``transport.writelines``)."""
    try:
        header = msgpack.packb([cmd.code, cmd.opaque, cmd.flags, cmd.remark, cmd.ext or None], use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode header of {cmd!r}: {exc}") from exc
    parts, body_len = _body_parts(cmd.body)
    head = _PREFIX.pack(4 + len(header) + body_len, len(header)) + header
    return [head, *parts]


def encode_bytes(cmd: Command) -> bytes:
    """Encode a command into one bytes object (tests and simple callers)."""
    return b"".join(bytes(p) for p in encode(cmd))


def _decode_header(raw: memoryview) -> tuple[int, int, int, str | None, dict[str, Any]]:
    try:
        header = msgpack.unpackb(raw, raw=False, use_list=True, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise RemoteProtocolError(f"undecodable frame header: {exc}") from exc
    if not isinstance(header, list) or len(header) < 5:
        raise RemoteProtocolError("frame header is not a 5-element array")
    code, opaque, flags, remark, ext = header[:5]
    if not (isinstance(code, int) and isinstance(opaque, int) and isinstance(flags, int)):
        raise RemoteProtocolError("frame header code/opaque/flags must be integers")
    if remark is not None and not isinstance(remark, str):
        raise RemoteProtocolError("frame header remark must be a string")
    if ext is None:
        ext = {}
    elif not isinstance(ext, dict):
        raise RemoteProtocolError("frame header ext must be a map")
    return code, opaque, flags, remark, ext


def _well_formed(header_bytes: Buffer, body: Buffer) -> Command | None:
    """The command of a well-formed header (the usual case, checked without a call per field);
    None for anything else, which :func:`_decode_header` judges and names the error of."""
    try:
        header = _unpackb(header_bytes, strict_map_key=False)
    except Exception:
        return None
    if (
        header.__class__ is list
        and len(header) == 5
        and header[0].__class__ is int
        and header[1].__class__ is int
        and header[2].__class__ is int
        and (header[3] is None or header[3].__class__ is str)
        and (header[4] is None or header[4].__class__ is dict)
    ):
        return Command(header[0], header[1], header[2], header[3], header[4], body)
    return None


class FrameDecoder:
    """Incremental decoder: feed it bytes as they arrive, get complete commands back.

    The announced length is checked against ``max_frame_size`` before any buffering, so a
    hostile length cannot make us allocate. After a :class:`~pymq.errors.ProtocolError` the
    decoder is unusable, like the connection it serves.

    Bodies are zero-copy ``memoryview`` slices. The buffer they point into is never mutated
    afterwards: leftover bytes move to a fresh buffer.
    """

    __slots__ = ("_broken", "_buf", "buffered", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._broken = False
        #: bytes received but not yet part of a complete frame (an attribute: read per read)
        self.buffered = 0

    def feed(self, data: Buffer) -> list[Command]:
        if self._broken:
            raise RemoteProtocolError("decoder already failed")
        if not self._buf and len(data) >= _PREFIX_SIZE:
            # The usual read of a request/response exchange: exactly one whole, well-formed frame and
            # nothing held. Anything else (several frames, a partial one, a bad one) takes the loop below.
            frame_len, header_len = _unpack_prefix_from(data)
            n = len(data)
            if frame_len + 4 == n and 4 + header_len <= frame_len <= self.max_frame_size:
                body_start = _PREFIX_SIZE + header_len
                cmd = _well_formed(
                    data[_PREFIX_SIZE:body_start], memoryview(data)[body_start:] if n > body_start else b""
                )
                if cmd is not None:
                    return [cmd]
        if self._buf:
            self._buf += data
            src: Buffer = self._buf
        else:
            src = data
        # The frame loop is inline (no call per read): this runs once per read of every connection.
        n = len(src)
        pos = 0
        out: list[Command] = []
        try:
            mv = memoryview(src)
            unpack_prefix = _PREFIX.unpack_from
            max_size = self.max_frame_size
            while n - pos >= _PREFIX_SIZE:
                frame_len, header_len = unpack_prefix(src, pos)
                if frame_len > max_size:
                    raise FrameTooLargeError(f"frame of {frame_len} bytes exceeds the maximum {max_size}")
                if frame_len < 4 or header_len > frame_len - 4:
                    raise RemoteProtocolError(f"bad frame lengths: frame {frame_len}, header {header_len}")
                end = pos + 4 + frame_len
                if end > n:
                    break
                header_start = pos + _PREFIX_SIZE
                body_start = header_start + header_len
                body = mv[body_start:end] if end != body_start else b""  # (no view for an empty body)
                cmd = _well_formed(mv[header_start:body_start], body)
                if cmd is None:
                    # Anything but the well-formed header is judged, and its error named, here.
                    code, opaque, flags, remark, ext = _decode_header(mv[header_start:body_start])
                    cmd = Command(code, opaque, flags, remark, ext, body)
                out.append(cmd)
                pos = end
        except Exception:
            self._broken = True
            self._buf = bytearray()
            self.buffered = 0
            raise
        if pos == n:
            if src is self._buf:
                self._buf = bytearray()
        elif pos or src is not self._buf:
            # Fresh buffer: views handed out above keep the old one alive and unchanged.
            self._buf = bytearray(memoryview(src)[pos:])
        self.buffered = len(self._buf)
        return out


class FrameCodec:
    """This frame format as a transport codec: a decoder per connection, ``encode`` per command.

    A codec serves the connections of one event loop (a server's, or a client's), so it keeps
    one msgpack packer for its headers instead of making one per command (as ``packb`` does).
    """

    __slots__ = ("_pack", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def decoder(self) -> FrameDecoder:
        return FrameDecoder(self.max_frame_size)

    def encode(self, cmd: Command) -> list[Buffer]:
        """:func:`encode` with this codec's packer, one call for the usual one-buffer body."""
        try:
            header = self._pack([cmd.code, cmd.opaque, cmd.flags, cmd.remark, cmd.ext or None])
        except (TypeError, ValueError, OverflowError) as exc:
            raise LocalProtocolError(f"cannot encode header of {cmd!r}: {exc}") from exc
        body = cmd.body
        if body.__class__ is bytes or body.__class__ is memoryview or body.__class__ is bytearray:
            size = len(body)
            head = _pack_prefix(4 + len(header) + size, len(header)) + header
            return [head, body] if size else [head]
        parts, body_len = _body_parts(body)
        return [_pack_prefix(4 + len(header) + body_len, len(header)) + header, *parts]
