"""Two wire formats on one port: a connection's first bytes pick its codec and its dispatcher.

A :class:`SniffingCodec` wraps the server's own codec. Each connection starts with a
:class:`SniffingDecoder`, which holds the first bytes until ``sniff`` can name the format,
then hands the connection that format's decoder, encoder and dispatcher
(:meth:`~pymq.transport.connection.Connection.switch_protocol`) and steps out: after the
first read a connection costs nothing extra whichever format it speaks. The chosen name is
kept in the channel's ``attrs["protocol"]`` (connection listings show it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pymq.errors import RemoteProtocolError
from pymq.protocol.command import Buffer, Command
from pymq.transport.codec import Codec, Decoder

if TYPE_CHECKING:
    from pymq.transport.connection import Connection
    from pymq.transport.dispatch import Dispatcher

#: the format name of the wrapped (pymq's own) codec
NATIVE = "pymq"


class ConnectionCodec(Decoder, Protocol):
    """A decoder that also encodes, for one connection (it may keep state across both)."""

    def encode(self, cmd: Command) -> Sequence[Buffer]: ...


@dataclass(frozen=True, slots=True)
class Alternative:
    """A second wire format: a fresh per-connection codec, and the dispatcher for its requests."""

    make_codec: Callable[[], ConnectionCodec]
    dispatcher: Dispatcher


class SniffingDecoder:
    """Holds a connection's first bytes until the format is known, then switches the connection."""

    __slots__ = ("_alternatives", "_conn", "_held", "_native", "_sniff")

    def __init__(
        self,
        native: Codec,
        alternatives: Mapping[str, Alternative],
        sniff: Callable[[bytes], str | None],
    ) -> None:
        self._native = native
        self._alternatives = alternatives
        self._sniff = sniff
        self._held = b""
        self._conn: Connection | None = None

    def bind(self, conn: Connection) -> None:
        """Called by the connection that owns this decoder (it is the one switched)."""
        self._conn = conn

    @property
    def buffered(self) -> int:
        return len(self._held)

    def feed(self, data: bytes) -> list[Command]:
        held = self._held + data
        name = self._sniff(held)
        if name is None:
            self._held = held
            return []
        conn = self._conn
        if conn is None:
            raise RemoteProtocolError("sniffing decoder used without a connection")
        if name == NATIVE:
            decoder = self._native.decoder()
            conn.switch_protocol(NATIVE, decoder, self._native.encode, None)
        else:
            alt = self._alternatives.get(name)
            if alt is None:
                raise RemoteProtocolError(f"wire format {name!r} is not served on this port")
            codec = alt.make_codec()
            conn.switch_protocol(name, codec, codec.encode, alt.dispatcher)
            conn.attrs["wire"] = codec  # what the format keeps per connection (e.g. the client's language)
            decoder = codec
        self._held = b""
        return decoder.feed(held)


class SniffingCodec:
    """``native`` plus ``alternatives`` on one listener; ``sniff(first_bytes)`` names the format."""

    def __init__(
        self,
        native: Codec,
        alternatives: Mapping[str, Alternative],
        sniff: Callable[[bytes], str | None],
    ) -> None:
        self.native = native
        self.alternatives = dict(alternatives)
        self.sniff = sniff

    def decoder(self) -> SniffingDecoder:
        return SniffingDecoder(self.native, self.alternatives, self.sniff)

    def encode(self, cmd: Command) -> Sequence[Buffer]:
        """Before the peer said a byte, a server writes nothing; if it must, it writes pymq's frames."""
        return self.native.encode(cmd)


__all__ = ["NATIVE", "Alternative", "ConnectionCodec", "SniffingCodec", "SniffingDecoder"]
