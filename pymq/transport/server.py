"""The RPC server: accepts connections and hands their requests to a dispatcher."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl as _ssl

from pymq.logs import get_logger
from pymq.tasks import wait_within
from pymq.transport.codec import DEFAULT_MAX_FRAME_SIZE, Codec, default_codec
from pymq.transport.connection import Connection
from pymq.transport.dispatch import Dispatcher
from pymq.transport.limits import ConnectionLimits, monotonic

log = get_logger("transport.server")

#: a TLS handshake not finished within this many seconds is dropped (asyncio's default is 60 s;
#: a stalled handshake holds a socket before any of the connection limits can see it)
TLS_HANDSHAKE_TIMEOUT = 10.0


class RpcServer:
    """Listens on ``host:port`` (port 0 picks a free one); :attr:`port` is the bound port after start."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        codec: Codec | None = None,
        name: str = "rpc",
        limits: ConnectionLimits | None = None,
        ssl: _ssl.SSLContext | None = None,
        tls_handshake_timeout: float = TLS_HANDSHAKE_TIMEOUT,
    ) -> None:
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        #: the wire format (default: pymq's frames, limited to ``max_frame_size``)
        self.codec = codec if codec is not None else default_codec(max_frame_size)
        self.name = name
        #: idle and frame timeouts, partial-frame budget (None: none; see transport.limits)
        self.limits = limits
        #: TLS for every connection (see transport.tls.server_context); None: plaintext
        self.ssl = ssl
        self.tls_handshake_timeout = tls_handshake_timeout
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def _make_connection(self) -> Connection:
        conn = Connection(self.dispatcher, self.codec, server_side=True, limits=self.limits)
        self.connections.add(conn)
        conn.add_close_callback(self.connections.discard)
        return conn

    async def start(self, sock: socket.socket | None = None) -> None:
        """Start serving; ``sock`` is an already bound socket to serve on (see :func:`bind_socket`)."""
        loop = asyncio.get_running_loop()
        handshake = self.tls_handshake_timeout if self.ssl is not None else None  # only meaningful with TLS
        if sock is not None:
            self._server = await loop.create_server(
                self._make_connection, sock=sock, backlog=1024, ssl=self.ssl, ssl_handshake_timeout=handshake
            )
        else:
            self._server = await loop.create_server(
                self._make_connection,
                self.host,
                self.port,
                reuse_address=True,
                family=socket.AF_INET,
                backlog=1024,
                ssl=self.ssl,
                ssl_handshake_timeout=handshake,
            )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        interval = self.limits.sweep_interval if self.limits is not None else None
        if interval is not None:
            self._sweeper = asyncio.create_task(self._sweep(interval), name=f"{self.name}-connection-sweep")
        log.info("listening", server=self.name, host=self.host, port=self.port, tls=self.ssl is not None)

    async def _sweep(self, interval: float) -> None:
        """Close connections past their idle or frame read timeout (one task, not a timer per connection)."""
        limits = self.limits
        assert limits is not None
        while True:
            await asyncio.sleep(interval)
            now = monotonic()
            for conn in list(self.connections):
                reason = limits.expired(conn, now)
                if reason is not None:
                    log.warning("closing_connection", server=self.name, peer=conn.remote_addr, reason=reason)
                    conn.release_partial()
                    conn.abort()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting, let running handlers finish for up to ``grace`` seconds, then close."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        await self.dispatcher.drain(grace)
        for alt in getattr(self.codec, "alternatives", {}).values():  # other wire formats' dispatchers
            await alt.dispatcher.drain(grace)
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            try:
                await wait_within(self._server.wait_closed(), timeout=grace)
            except TimeoutError:
                for conn in list(self.connections):
                    conn.abort()
            self._server = None


def cannot_listen(host: str, port: int, exc: OSError) -> str:
    """The one wording of a listen failure (port in use, not permitted), whichever daemon hits it."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return f"cannot listen on {host}:{port}: {reason}"


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind a listening TCP socket now (to learn the port before serving)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
