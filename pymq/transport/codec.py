"""The codec seam: how a connection turns bytes into commands and commands into bytes.

A :class:`Codec` makes one :class:`Decoder` per connection (decoders keep partial frames)
and encodes commands into buffers written in order. The transport uses nothing else of a
wire format, so a RocketMQ-remoting codec is one new module plus a header/body adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pymq.protocol.command import Buffer, Command
from pymq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameCodec


class Decoder(Protocol):
    def feed(self, data: bytes) -> list[Command]:
        """Commands completed by ``data``; raises ProtocolError on garbage."""
        ...

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (servers bound these, see transport.limits)."""
        ...


class Codec(Protocol):
    def decoder(self) -> Decoder:
        """A fresh decoder for one connection."""
        ...

    def encode(self, cmd: Command) -> Sequence[Buffer]:
        """Buffers to write in order; raises LocalProtocolError if ``cmd`` cannot be encoded."""
        ...


def default_codec(max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> Codec:
    """pymq's own frame format (:mod:`pymq.protocol.frame`)."""
    return FrameCodec(max_frame_size)


__all__ = ["DEFAULT_MAX_FRAME_SIZE", "Codec", "Decoder", "default_codec"]
