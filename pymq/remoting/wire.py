"""One remoting connection as the transport sees it: RocketMQ frames in, pymq Commands out, and back.

:class:`RemotingWire` is the per-connection codec that :mod:`pymq.transport.sniffing` hands a
connection whose first bytes are a RocketMQ frame. Requests become
:class:`~pymq.protocol.command.Command` objects with the RocketMQ code and the extFields as
``ext`` (strings, as the wire carries them), so the transport's dispatcher, flow control and
timeouts work unchanged. Responses go back in the serialize type (JSON or ROCKETMQ) of the
request they answer; requests the server pushes (NOTIFY_CONSUMER_IDS_CHANGED,
CHECK_TRANSACTION_STATE) in the type the client spoke last. The client's language and version,
which RocketMQ keeps per request, are kept per connection (what connection listings show).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymq.protocol.command import Buffer, Command
from pymq.remoting.codes import FLAG_RESPONSE, LanguageCode, SerializeType
from pymq.remoting.command import DEFAULT_MAX_FRAME_SIZE, RemotingDecoder, frame_prefix, header_bytes

__all__ = ["RemotingWire", "ext_to_wire"]

_JAVA = LanguageCode.JAVA


def ext_to_wire(ext: dict[str, Any]) -> dict[str, str]:
    """extFields as RocketMQ carries them: every value a string (``true``/``false`` for booleans).

    ``ext`` itself when its values are all strings already (not a copy: do not change it).
    """
    for v in ext.values():
        if v.__class__ is not str:
            break
    else:
        return ext  # every value a string already (the usual answer): as it is
    out: dict[str, str] = {}
    for k, v in ext.items():
        if v.__class__ is int:  # (not a bool)
            out[k] = str(v)
        elif v is None:
            continue
        elif isinstance(v, str):
            out[k] = v
        elif isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = str(v)
    return out


class RemotingWire:
    """Decoder and encoder of one RocketMQ remoting connection (sans-IO)."""

    __slots__ = ("_decoder", "_seen", "_types", "language", "serialize_type", "version")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._decoder = RemotingDecoder(max_frame_size)
        #: the client's language and version, from its latest request
        self.language = LanguageCode.JAVA
        self.version = 0
        #: the serialize type of the client's first request (pushed requests use it)
        self.serialize_type = SerializeType.JSON
        self._seen = False
        #: opaque -> serialize type of a request not answered yet when the types differ
        self._types: dict[int, SerializeType] = {}

    @property
    def buffered(self) -> int:
        return self._decoder.buffered

    def feed(self, data: bytes) -> list[Command]:
        # the decoder's field tuples (no RemotingCommand per request) straight into Commands
        out: list[Command] = []
        for code, language, version, opaque, flag, remark, ext, body, stype in self._decoder.feed_fields(data):
            if not flag & FLAG_RESPONSE:
                self.language = language
                self.version = version
                if not self._seen:
                    self.serialize_type = stype
                    self._seen = True
                elif stype is not self.serialize_type:
                    # a client that mixes types (rare): remember this request's for its answer
                    self._types[opaque] = stype
            out.append(Command(code, opaque, flag, remark, ext or {}, body))
        return out

    def encode(self, cmd: Command) -> Sequence[Buffer]:
        stype = self.serialize_type
        if cmd.flags & FLAG_RESPONSE and self._types:
            stype = self._types.pop(cmd.opaque, stype)
        ext = cmd.ext
        header = header_bytes(
            stype,
            cmd.code,
            _JAVA,
            self.version,
            cmd.opaque,
            cmd.flags,
            cmd.remark,
            ext_to_wire(ext) if ext else None,
        )
        body = cmd.body
        if isinstance(body, (bytes, bytearray, memoryview)):
            return [frame_prefix(stype, len(header), len(body)) + header, body]
        parts = list(body)
        return [frame_prefix(stype, len(header), sum(map(len, parts))) + header, *parts]
