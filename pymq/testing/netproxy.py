"""A TCP proxy that can cut its link, for network-partition tests (as Jepsen and toxiproxy make
them, on 127.0.0.1 only).

    async with LinkProxy("127.0.0.1:9876") as p:   # listens on an ephemeral 127.0.0.1 port
        connect_to(p.address)                       # everything goes through to the target
        p.black_hole()                              # bytes stop, both ways; connections stay open
        p.heal()                                    # the held bytes flow again, none lost

Put one proxy on every link between two nodes (give a node the proxy's address instead of the
target's) and black-hole the links that cross the partition.

**A black hole** behaves like a network that drops every packet while the hosts stay up: the
proxy stops reading from both sides of every connection (past the asyncio stream buffer, some
64 KiB, the senders' bytes wait in socket buffers, then their writes block, as TCP does while
its segments go unanswered), holds a chunk
(or an end of stream, or a reset) it had already read, and connects a new connection's
upstream side only once healed (the
connection is accepted at once, as the kernel would, but nothing gets through). No connection
is closed by the proxy: a node that gives up on a silent link closes it itself, as it would on
a real network. **Heal** lets everything held flow on in order, as TCP's retransmissions would.
"""

from __future__ import annotations

import asyncio
import contextlib

from pymq.tasks import cancel_and_wait

__all__ = ["LinkProxy"]

#: bytes read from one side at a time
CHUNK = 64 * 1024


class LinkProxy:
    """Forwards every connection to ``target`` (``host:port``); :meth:`black_hole` and :meth:`heal`."""

    def __init__(self, target: str, *, host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = host
        self.address = ""
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        #: connections accepted so far (tests check that a link was used)
        self.accepted = 0

    @property
    def blocked(self) -> bool:
        return not self._open.is_set()

    async def start(self) -> LinkProxy:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"{self.host}:{port}"
        return self

    def black_hole(self) -> None:
        """Stop every byte, both ways, on every connection (old and new); close none."""
        self._open.clear()

    def heal(self) -> None:
        """Let the bytes flow again (those held first, in order)."""
        self._open.set()

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            await cancel_and_wait(t)
        self._tasks.clear()
        self._writers.clear()

    async def __aenter__(self) -> LinkProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- one connection -----------------------------------------------------------------------------------

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.ensure_future(self._link(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _link(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self._writers.add(c_writer)
        try:
            await self._open.wait()  # a black hole: the upstream side is not even connected
            host, _, port = self.target.rpartition(":")
            try:
                t_reader, t_writer = await asyncio.open_connection(host, int(port))
            except OSError:
                return
            self._writers.add(t_writer)
            try:
                await asyncio.gather(self._pump(c_reader, t_writer), self._pump(t_reader, c_writer))
            finally:
                t_writer.close()
                self._writers.discard(t_writer)
        finally:
            c_writer.close()
            self._writers.discard(c_writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction until its EOF (passed on as a half-close) or an error."""
        opened = self._open
        while True:
            await opened.wait()  # black-holed: read nothing (the sender's bytes wait in its buffers)
            try:
                data = await reader.read(CHUNK)
            except (ConnectionError, OSError):
                data = None
            # Black-holed while reading: hold the chunk, and an EOF or a reset too (the other side
            # must not learn that this one closed before the link heals).
            await opened.wait()
            if not data:
                break
            try:
                writer.write(data)
                await writer.drain()
            except (ConnectionError, OSError):
                return
        if data is None:
            writer.close()  # a reset: passed on as a close
            return
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
