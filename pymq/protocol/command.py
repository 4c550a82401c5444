"""The request/response envelope every codec produces and every handler sees.

A :class:`Command` is code, correlation id (``opaque``), flags, remark, named header
fields (``ext``) and a raw body. It knows nothing of bytes on the wire: the frame codec
(:mod:`pymq.protocol.frame`), or later a RocketMQ-remoting codec, turns it into bytes and
back. Typed views of ``ext`` live in :mod:`pymq.protocol.requests`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

Buffer = bytes | bytearray | memoryview
Body = Buffer | Sequence[Buffer]


class Command:
    """One request or response: code, correlation id, flags, remark, ext fields and a raw body.

    ``body`` is a bytes-like object, or (outgoing only) a sequence of them, which the
    transport writes without joining.
    """

    __slots__ = ("body", "code", "ext", "flags", "opaque", "remark")

    def __init__(
        self,
        code: int,
        opaque: int = 0,
        flags: int = 0,
        remark: str | None = None,
        ext: dict[str, Any] | None = None,
        body: Body = b"",
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.flags = flags
        self.remark = remark
        self.ext = ext if ext is not None else {}
        self.body = body

    @classmethod
    def request(cls, code: int, ext: dict[str, Any] | None = None, body: Body = b"") -> Command:
        return cls(int(code), 0, 0, None, ext, body)

    def response(
        self,
        code: int = 0,
        remark: str | None = None,
        ext: dict[str, Any] | None = None,
        body: Body = b"",
    ) -> Command:
        """A response to this request (same opaque, response flag set)."""
        return Command(int(code), self.opaque, FLAG_RESPONSE, remark, ext, body)

    @property
    def is_response(self) -> bool:
        return bool(self.flags & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flags & FLAG_ONEWAY)

    def body_bytes(self) -> bytes:
        """The body as one ``bytes`` object (joins a sequence body)."""
        body = self.body
        if isinstance(body, bytes):
            return body
        if isinstance(body, (bytearray, memoryview)):
            return bytes(body)
        return b"".join(body)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return f"<Command {kind} code={self.code} opaque={self.opaque} ext={self.ext!r} remark={self.remark!r}>"
