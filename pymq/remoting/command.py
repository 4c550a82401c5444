"""RemotingCommand and its frame codec (sans-IO), as RocketMQ 4.x clients write it.

Frame layout, big-endian::

    0   i32  length        bytes that follow: 4 + header_len + body_len
    4   u8   serialize     0 = JSON, 1 = ROCKETMQ (binary)
    5   u24  header_len
    8   header
    8+h body

A JSON header is the fastjson object ``{"code", "extFields", "flag", "language", "opaque",
"remark", "serializeTypeCurrentRPC", "version"}``; a ROCKETMQ header is
``i16 code, u8 language, i16 version, i32 opaque, i32 flag, i32+remark, i32+extFields``
where extFields is a run of ``u16+key, i32+value``. A response goes back in the request's
serialize type with the request's ``opaque`` and flag bit 0 set.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_str
from typing import Any, Literal, TypeVar

from pymq.errors import FrameTooLargeError, LocalProtocolError, RemoteProtocolError
from pymq.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "RemotingCommand",
    "RemotingDecoder",
    "RemotingFrameError",
    "decode_frame",
    "encode",
    "encode_header",
    "frame_prefix",
    "sniff",
]

#: Same bound as pymq's own frames: a 4 MiB body times a batch, plus headroom.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024 + 1024 * 1024

_PREFIX = struct.Struct(">iI")
_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ZERO = b"\x00\x00\x00\x00"
_MAX_HEADER_LEN = (1 << 24) - 1
_T = TypeVar("_T")


class RemotingFrameError(RemoteProtocolError):
    """A remoting frame cannot be decoded; ``field`` names the part at fault."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"remoting frame: {field_name}: {reason}")
        self.field = field_name


@dataclass(slots=True)
class RemotingCommand:
    """One RocketMQ request or response; ``ext_fields`` carries the custom header as strings."""

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON
    extra: dict[str, Any] = field(default_factory=dict)
    """JSON header members we do not model (kept so a test can see what a client sent)."""

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response bit set."""
        return RemotingCommand(
            code=code,
            language=LanguageCode.JAVA,
            version=self.version,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )


# --- encoding ---------------------------------------------------------------------------------------


def _json_header(
    code: int, language: str, version: int, opaque: int, flag: int, remark: str | None, ext: dict[str, str] | None
) -> bytes:
    """The JSON header, byte for byte what ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)`` writes for it (its members in sorted order), without building the object:
    the fixed members are a template, the strings go through json's own ``encode_basestring``."""
    if type(code) is not int or type(flag) is not int or type(opaque) is not int or type(version) is not int:
        return _json_header_dumps(code, language, version, opaque, flag, remark, ext)
    try:
        parts = ['{"code":', str(code)]
        if ext:
            members = ",".join([_json_str(k) + ":" + _json_str(ext[k]) for k in sorted(ext)])
            parts += (',"extFields":{', members, "}")
        parts += [',"flag":', str(flag), ',"language":', _json_str(language), ',"opaque":', str(opaque)]
        if remark is not None:
            parts += [',"remark":', _json_str(remark)]
    except TypeError:  # a value that is not a string: json.dumps writes it as its own type (or refuses it)
        return _json_header_dumps(code, language, version, opaque, flag, remark, ext)
    parts += [',"serializeTypeCurrentRPC":"JSON","version":', str(version), "}"]
    return "".join(parts).encode()


def _json_header_dumps(
    code: int, language: str, version: int, opaque: int, flag: int, remark: str | None, ext: dict[str, Any] | None
) -> bytes:
    obj: dict[str, Any] = {
        "code": code,
        "flag": flag,
        "language": language,
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": version,
    }
    if ext:
        obj["extFields"] = ext
    if remark is not None:
        obj["remark"] = remark
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


#: an extFields key's bytes with their length word (answers use a few keys; bounded)
_KEY_PREFIXES: dict[str, bytes] = {}


def _key_prefix(k: str) -> bytes:
    kb = k.encode()
    if len(kb) > 0xFFFF:
        raise LocalProtocolError(f"extFields key too long: {k[:40]!r}")
    prefix = _U16.pack(len(kb)) + kb
    if len(_KEY_PREFIXES) < 256:
        _KEY_PREFIXES[k] = prefix
    return prefix


def _binary_header(
    code: int, language: int, version: int, opaque: int, flag: int, remark: str | None, ext: dict[str, str] | None
) -> bytes:
    rb = remark.encode() if remark else b""
    if not ext:
        return _FIXED.pack(code, language, version, opaque, flag) + _I32.pack(len(rb)) + rb + _ZERO
    parts: list[bytes] = []
    prefixes, pack32 = _KEY_PREFIXES, _I32.pack
    for k, v in ext.items():
        vb = v.encode()
        parts += (prefixes.get(k) or _key_prefix(k), pack32(len(vb)), vb)
    ext_bytes = b"".join(parts)
    return b"".join(
        (_FIXED.pack(code, language, version, opaque, flag), pack32(len(rb)), rb, pack32(len(ext_bytes)), ext_bytes)
    )


def header_bytes(
    serialize_type: SerializeType,
    code: int,
    language: LanguageCode,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str] | None,
) -> bytes:
    """A header from its fields in ``serialize_type`` (no length words, no body): what
    :func:`encode_header` writes for the RemotingCommand of these fields, without one."""
    if serialize_type is SerializeType.ROCKETMQ:
        if not -(1 << 15) <= code < (1 << 15):
            raise LocalProtocolError(f"code {code} does not fit the ROCKETMQ header's i16")
        header = _binary_header(code, int(language), version, opaque, flag, remark, ext)
    else:
        header = _json_header(code, language.name, version, opaque, flag, remark, ext)
    if len(header) > _MAX_HEADER_LEN:
        raise LocalProtocolError(f"remoting header of {len(header)} bytes exceeds 2^24-1")
    return header


def encode_header(cmd: RemotingCommand) -> bytes:
    """The header of ``cmd`` in its ``serialize_type`` (no length words, no body)."""
    return header_bytes(
        cmd.serialize_type, cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields
    )


def frame_prefix(serialize_type: SerializeType, header_len: int, body_len: int) -> bytes:
    """The frame's two leading words: length, then serialize type and header length."""
    return _PREFIX.pack(4 + header_len + body_len, (int(serialize_type) << 24) | header_len)


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame for ``cmd`` in its ``serialize_type``."""
    header = encode_header(cmd)
    return frame_prefix(cmd.serialize_type, len(header), len(cmd.body)) + header + cmd.body


# --- decoding ---------------------------------------------------------------------------------------


def _as_int(obj: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    v = obj.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise RemotingFrameError(name, f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise RemotingFrameError(name, f"{v} out of range")
    return v


def _ext_value(name: str, v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    raise RemotingFrameError(f"extFields.{name}", f"expected a string, got {type(v).__name__}")


def _decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        obj = json.loads(header)
    except (UnicodeDecodeError, ValueError) as e:
        raise RemotingFrameError("header", f"malformed JSON: {e}") from None
    if not isinstance(obj, dict):
        raise RemotingFrameError("header", "JSON header is not an object")
    lang_name = obj.pop("language", "JAVA")
    if not isinstance(lang_name, str) or lang_name not in LanguageCode.__members__:
        raise RemotingFrameError("language", f"unknown language {lang_name!r}")
    remark = obj.pop("remark", None)
    if remark is not None and not isinstance(remark, str):
        raise RemotingFrameError("remark", "expected a string")
    ext = obj.pop("extFields", None)
    if ext is not None:
        if not isinstance(ext, dict):
            raise RemotingFrameError("extFields", "expected an object")
        ext = {str(k): _ext_value(str(k), v) for k, v in ext.items() if v is not None}
    if "code" not in obj:
        raise RemotingFrameError("code", "missing")
    cmd = RemotingCommand(
        code=_as_int(obj, "code", 0, -(1 << 31), (1 << 31) - 1),
        language=LanguageCode[lang_name],
        version=_as_int(obj, "version", 0, -(1 << 31), (1 << 31) - 1),
        opaque=_as_int(obj, "opaque", 0, -(1 << 31), (1 << 31) - 1),
        flag=_as_int(obj, "flag", 0, -(1 << 31), (1 << 31) - 1),
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.JSON,
    )
    for k in ("code", "version", "opaque", "flag", "serializeTypeCurrentRPC"):
        obj.pop(k, None)
    cmd.extra = obj
    return cmd


def _read_str(buf: bytes, pos: int, end: int, short: bool, what: str) -> tuple[str | None, int]:
    size = 2 if short else 4
    if pos + size > end:
        raise RemotingFrameError(what, "length runs past the header")
    n = _U16.unpack_from(buf, pos)[0] if short else _I32.unpack_from(buf, pos)[0]
    pos += size
    if n < 0 or pos + n > end:
        raise RemotingFrameError(what, f"length {n} runs past the header")
    if n == 0:
        return None, pos
    try:
        return buf[pos : pos + n].decode(), pos + n
    except UnicodeDecodeError:
        raise RemotingFrameError(what, "not UTF-8") from None


def _read_ext(buf: bytes, pos: int, end: int) -> dict[str, str]:
    """The ``u16+key, i32+value`` run of a ROCKETMQ header (the hot loop of a binary send)."""
    ext: dict[str, str] = {}
    u16, i32 = _U16.unpack_from, _I32.unpack_from
    try:
        while pos < end:
            if pos + 2 > end:
                raise RemotingFrameError("extFields key", "length runs past the header")
            (n,) = u16(buf, pos)
            pos += 2
            # an empty key is read as RocketMQ's decoder reads it (and as a JSON header gives it)
            if pos + n + 4 > end:
                raise RemotingFrameError("extFields key", f"length {n} runs past the header")
            key = buf[pos : pos + n].decode()
            pos += n
            (m,) = i32(buf, pos)
            pos += 4
            if m < 0 or pos + m > end:
                raise RemotingFrameError(f"extFields.{key}", f"length {m} runs past the header")
            ext[key] = buf[pos : pos + m].decode()
            pos += m
    except UnicodeDecodeError:
        raise RemotingFrameError("extFields", "not UTF-8") from None
    return ext


def _decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
    end = len(header)
    if end < _FIXED.size:
        raise RemotingFrameError("header", f"ROCKETMQ header of {end} bytes is shorter than {_FIXED.size}")
    code, lang, version, opaque, flag = _FIXED.unpack_from(header, 0)
    try:
        language = LanguageCode(lang)
    except ValueError:
        raise RemotingFrameError("language", f"unknown language code {lang}") from None
    remark, pos = _read_str(header, _FIXED.size, end, False, "remark")
    if pos + 4 > end:
        raise RemotingFrameError("extFields", "length runs past the header")
    ext_len = _I32.unpack_from(header, pos)[0]
    pos += 4
    if ext_len < 0 or pos + ext_len > end:
        raise RemotingFrameError("extFields", f"length {ext_len} runs past the header")
    ext: dict[str, str] | None = None
    if ext_len:
        ext = _read_ext(header, pos, pos + ext_len)
    return RemotingCommand(
        code=code,
        language=language,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_frame(frame: bytes) -> RemotingCommand:
    """Decode one whole frame (length word included)."""
    if len(frame) < 8:
        raise RemotingFrameError("length", f"frame of {len(frame)} bytes is shorter than 8")
    length, word = _PREFIX.unpack_from(frame, 0)
    if length != len(frame) - 4:
        raise RemotingFrameError("length", f"announces {length} bytes, frame carries {len(frame) - 4}")
    return _decode_after_length(memoryview(frame)[4:], word)


def _decode_after_length(rest: memoryview, word: int) -> RemotingCommand:
    stype, header_len = word >> 24, word & _MAX_HEADER_LEN
    if header_len > len(rest) - 4:
        raise RemotingFrameError("header_len", f"{header_len} runs past the frame ({len(rest) - 4} bytes)")
    header = bytes(rest[4 : 4 + header_len])
    body = bytes(rest[4 + header_len :])
    if stype == SerializeType.JSON:
        return _decode_json_header(header, body)
    if stype == SerializeType.ROCKETMQ:
        return _decode_binary_header(header, body)
    raise RemotingFrameError("serialize_type", f"unknown serialize type {stype}")


#: a decoded frame's fields, in this order (what :meth:`RemotingDecoder.feed_fields` gives; no RemotingCommand)
Fields = tuple[int, LanguageCode, int, int, int, "str | None", "dict[str, str] | None", bytes, SerializeType]

_LANGUAGES = {int(m): m for m in LanguageCode}
_LANGUAGE_NAMES = dict(LanguageCode.__members__)
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_JSON, _ROCKETMQ = SerializeType.JSON, SerializeType.ROCKETMQ


def _fields_of(cmd: RemotingCommand) -> Fields:
    return (
        cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, cmd.body,
        cmd.serialize_type,
    )  # fmt: skip


def _ascii_ext(region: bytes) -> dict[str, str] | None:
    """A ROCKETMQ header's extFields run when it is all ASCII (the usual header): decoded once, sliced
    by the length words; None when anything is odd (the byte-wise reader then names it)."""
    s = region.decode("ascii")
    ext: dict[str, str] = {}
    p, end = 0, len(region)
    u16, i32 = _U16.unpack_from, _I32.unpack_from
    try:
        while p < end:
            (n,) = u16(region, p)
            if not n:
                return None
            k = p + 2 + n
            (m,) = i32(region, k)  # ASCII: its top byte < 0x80, so m >= 0
            ext[s[p + 2 : k]] = s[k + 4 : k + 4 + m]
            p = k + 4 + m
    except struct.error:  # a length word past the end
        return None
    return ext if p == end else None


def _fields_after_length(rest: memoryview, word: int) -> Fields:
    """:func:`_decode_after_length`'s fields, without the RemotingCommand: the well-formed header
    is read inline; anything else goes to the full decoder, which names what is wrong."""
    stype, header_len = word >> 24, word & _MAX_HEADER_LEN
    if header_len <= len(rest) - 4:
        header = bytes(rest[4 : 4 + header_len])
        if stype == 1:  # ROCKETMQ
            end = len(header)
            if end >= 21:
                code, lang, version, opaque, flag = _FIXED.unpack_from(header, 0)
                language = _LANGUAGES.get(lang)
                (n,) = _I32.unpack_from(header, 13)
                pos = 17 + n
                if language is not None and n >= 0 and pos + 4 <= end:
                    (ext_len,) = _I32.unpack_from(header, pos)
                    ext_at = pos + 4
                    if ext_len >= 0 and ext_at + ext_len <= end:
                        region = header[ext_at : ext_at + ext_len]
                        ext = _ascii_ext(region) if region.isascii() else None
                        remark_bytes = header[17:pos]
                        if (ext is not None or not ext_len) and remark_bytes.isascii():
                            return (
                                code, language, version, opaque, flag, remark_bytes.decode() if n else None,
                                ext or None, bytes(rest[4 + header_len :]), _ROCKETMQ,
                            )  # fmt: skip
        elif stype == 0:  # JSON
            try:
                obj = json.loads(header)
            except (UnicodeDecodeError, ValueError):
                obj = None
            if type(obj) is dict:
                fields = _json_fields(obj)
                if fields is not None:
                    code, language, version, opaque, flag, remark, ext = fields
                    return code, language, version, opaque, flag, remark, ext, bytes(rest[4 + header_len :]), _JSON
    return _fields_of(_decode_after_length(rest, word))


def _json_fields(
    obj: dict[str, Any],
) -> tuple[int, LanguageCode, int, int, int, str | None, dict[str, str] | None] | None:
    """A JSON header's fields when every member is as RocketMQ writes it; None: the full decoder judges."""
    get = obj.get
    name = get("language", "JAVA")
    language = _LANGUAGE_NAMES.get(name) if type(name) is str else None
    code, version, opaque, flag = get("code"), get("version", 0), get("opaque", 0), get("flag", 0)
    remark, ext = get("remark"), get("extFields")
    if (
        language is None
        or type(code) is not int
        or type(version) is not int
        or type(opaque) is not int
        or type(flag) is not int
        or not (_I32_MIN <= code <= _I32_MAX and _I32_MIN <= version <= _I32_MAX)
        or not (_I32_MIN <= opaque <= _I32_MAX and _I32_MIN <= flag <= _I32_MAX)
        or (remark is not None and type(remark) is not str)
    ):
        return None
    if ext is not None:
        if type(ext) is not dict:
            return None
        for v in ext.values():
            if type(v) is not str:
                return None
    return code, language, version, opaque, flag, remark, ext


class RemotingDecoder:
    """Stream decoder for one connection: feed bytes, get whole commands.

    Raises :class:`RemotingFrameError` (or ``FrameTooLargeError``) when the stream is broken;
    the connection is then unusable and should be closed with the error as the logged reason.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._max = max_frame_size

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        return self._frames(data, _decode_after_length)

    def feed_fields(self, data: bytes) -> list[Fields]:
        """As :meth:`feed`, each frame's fields as a tuple (:data:`Fields`) instead of a RemotingCommand:
        the same frames, the same errors, without the object (the broker's hot path)."""
        if not self._buf and len(data) >= 8:
            # the usual read: exactly one whole frame and nothing held (no copy into the buffer)
            length, word = _PREFIX.unpack_from(data, 0)
            if length == len(data) - 4 and length <= self._max:
                view = memoryview(data)[4:]
                try:
                    return [_fields_after_length(view, word)]
                except Exception:
                    self._buf += data  # held as the loop below holds a frame it could not decode
                    raise
                finally:
                    view.release()
        return self._frames(data, _fields_after_length)

    def _frames(self, data: bytes, decode: Callable[[memoryview, int], _T]) -> list[_T]:
        self._buf += data
        out: list[_T] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= 4:
            length = _I32.unpack_from(buf, pos)[0]
            if length < 4:
                raise RemotingFrameError("length", f"{length} is shorter than the header-length word")
            if length > self._max:
                raise FrameTooLargeError(f"remoting frame of {length} bytes exceeds {self._max}")
            if len(buf) - pos < 4 + length:
                break
            rest = memoryview(buf)[pos + 4 : pos + 4 + length]
            try:
                word = _U32.unpack_from(rest, 0)[0]
                out.append(decode(rest, word))
            finally:
                rest.release()
            pos += 4 + length
        if pos:
            del buf[:pos]
        return out


def sniff(prefix: bytes) -> Literal["pymq", "remoting"] | None:
    """Which wire format a connection speaks, from its first 9 bytes (``None``: need more).

    pymq's header is a msgpack array, whose first byte is never ``{`` (0x7B is a msgpack
    positive fixint), and its u32 header length never reaches 2^24; a RocketMQ frame has
    serialize type 1 in byte 4, or type 0 and a JSON header starting with ``{`` at byte 8.
    """
    if len(prefix) < 5:
        return None
    if prefix[4] == SerializeType.ROCKETMQ:
        return "remoting"
    if prefix[4] != SerializeType.JSON:
        return "pymq"
    if len(prefix) < 9:
        return None
    return "remoting" if prefix[8] == 0x7B else "pymq"
