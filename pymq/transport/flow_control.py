"""Write-side flow control for one connection.

When the transport's output buffer passes its high-water mark asyncio calls
``pause_writing``. A server then stops reading from that peer, so a client that does not
read its responses cannot make the broker buffer without bound; a client's own senders
wait in :meth:`FlowControl.drain` until the buffer drains.
"""

from __future__ import annotations

import asyncio


class FlowControl:
    __slots__ = ("_pause_reading", "_transport", "_writable", "read_paused")

    def __init__(self, transport: asyncio.Transport, *, pause_reading_when_blocked: bool) -> None:
        self._transport = transport
        self._pause_reading = pause_reading_when_blocked
        self._writable = asyncio.Event()
        self._writable.set()
        self.read_paused = False

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def drain(self) -> None:
        await self._writable.wait()

    def pause_writing(self) -> None:
        self._writable.clear()
        if self._pause_reading and not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._writable.set()
        if self.read_paused:
            self.read_paused = False
            self._transport.resume_reading()

    def connection_lost(self) -> None:
        # Wake writers so they see the closed connection instead of waiting forever.
        self._writable.set()
