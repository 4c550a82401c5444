"""A TLS transport's writes joined into one buffer per call (one TLS record per 16 KiB, not per piece).

A connection writes each command as a list of buffers (a frame's header and its body, or a
tick's worth of answers) with one ``writelines`` per loop tick. On a plain socket that is one
``writev``. The TLS transports (uvloop's and asyncio's ``sslproto``) instead hand each buffer
to ``SSLObject.write`` on its own, and every call makes at least one TLS record: a header, an
AEAD tag and an encryption set-up each, and on the reading side one ``SSLObject.read`` each.
Joining the buffers first costs one copy of small data (the TLS layer copies it anyway, into
its BIO) and halves the records of a single send (see docs/PERFORMANCE.md, issue 34).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pymq.protocol.command import Buffer

_join = b"".join


class JoinedWrites:
    """Wraps a TLS transport: ``writelines`` writes its buffers as one; everything else is the transport's."""

    __slots__ = ("_transport",)

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def writelines(self, buffers: Iterable[Buffer]) -> None:
        self._transport.write(_join(buffers))

    def write(self, data: Buffer) -> None:
        self._transport.write(data)

    def is_closing(self) -> bool:
        return bool(self._transport.is_closing())

    def __getattr__(self, name: str) -> Any:  # the rest (close, abort, get_extra_info, pause_reading...)
        return getattr(self._transport, name)
