"""Flow control for one connection, in both directions.

When the transport's output buffer passes its high-water mark asyncio calls
``pause_writing``. A server then stops reading from that peer (and parks requests it has
already decoded), so a client that does not read its responses cannot make the broker
buffer without bound; a client's own senders wait in :meth:`FlowControl.drain` until the
buffer drains.

Reading is also paused while too many decoded requests wait for a handler slot
(:meth:`backlog_full`): a client pipelining held pulls or SYNC_FLUSH sends faster than
they complete fills the kernel's socket buffer, not the broker's memory. Reading resumes
only when neither reason holds.
"""

from __future__ import annotations

import asyncio


class FlowControl:
    __slots__ = (
        "_backlog_full",
        "_pause_reading",
        "_reading_paused",
        "_transport",
        "_writable",
        "read_paused",
        "writable",
    )

    def __init__(self, transport: asyncio.Transport, *, pause_reading_when_blocked: bool) -> None:
        self._transport = transport
        self._pause_reading = pause_reading_when_blocked
        self._writable = asyncio.Event()
        self._writable.set()
        #: whether the output buffer has room (the event's state as a plain attribute: read per request)
        self.writable = True
        #: the peer is not reading our responses: park new requests (server side only)
        self.read_paused = False
        self._backlog_full = False
        self._reading_paused = False

    @property
    def reading(self) -> bool:
        """Whether the transport is reading from the socket."""
        return not self._reading_paused

    async def drain(self) -> None:
        await self._writable.wait()

    def pause_writing(self) -> None:
        self.writable = False
        self._writable.clear()
        if self._pause_reading:
            self.read_paused = True
            self._update_reading()

    def resume_writing(self) -> None:
        self.writable = True
        self._writable.set()
        if self.read_paused:
            self.read_paused = False
            self._update_reading()

    def backlog_full(self, full: bool) -> None:
        """Stop reading while decoded requests pile up behind busy handlers."""
        if full != self._backlog_full:
            self._backlog_full = full
            self._update_reading()

    def _update_reading(self) -> None:
        pause = self.read_paused or self._backlog_full
        if pause == self._reading_paused or self._transport.is_closing():
            return
        self._reading_paused = pause
        if pause:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    def connection_lost(self) -> None:
        # Wake writers so they see the closed connection instead of waiting forever.
        self.writable = True
        self._writable.set()
