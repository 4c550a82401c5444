"""The RPC client: one shared connection per address, reconnect with backoff."""

from __future__ import annotations

import asyncio
import random
import socket
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pymq.errors import ClosedError, ConnectError, ConnectionClosedError, error_for_response
from pymq.logs import get_logger
from pymq.protocol.command import Command
from pymq.tasks import wait_within
from pymq.transport.codec import DEFAULT_MAX_FRAME_SIZE, Codec, default_codec
from pymq.transport.connection import Connection
from pymq.transport.dispatch import Dispatcher
from pymq.transport.tls import client_context, split_scheme

log = get_logger("transport.client")


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = split_scheme(addr)[0].rpartition(":")
    if not sep or not port.isdigit():
        raise ConnectError(f"bad address {addr!r}, expected host:port")
    return host or "127.0.0.1", int(port)


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with jitter between failed connection attempts to one address."""

    initial: float = 0.05
    maximum: float = 5.0
    delay: float = 0.0
    next_attempt: float = 0.0

    def failed(self, now: float) -> None:
        self.delay = self.initial if self.delay == 0 else min(self.maximum, self.delay * 2)
        self.next_attempt = now + self.delay * (0.5 + random.random() / 2)

    def succeeded(self) -> None:
        self.delay = 0.0
        self.next_attempt = 0.0

    def remaining(self, now: float) -> float:
        return max(0.0, self.next_attempt - now)


class RpcClient:
    """Sends requests to many peers. Callers share one connection per address.

    ``dispatcher`` handles requests the server pushes over those connections. ``ssl``: TLS
    for every connection; an address written ``tls://host:port`` uses TLS in any case (``ssl``,
    or a context verifying against the system CAs). ``signer`` signs every request sent
    (:func:`pymq.security.signing.signer`). ``session`` (with a ``signer``): run on each new
    connection, its requests signed, before anyone uses it; when it returns True the connection's
    later requests go unsigned (:func:`pymq.security.session.open_session`: an ACL session on a
    TLS connection).
    """

    def __init__(
        self,
        dispatcher: Dispatcher | None = None,
        *,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        backoff_max: float = 5.0,
        codec: Codec | None = None,
        ssl: _ssl.SSLContext | None = None,
        signer: Callable[[Command], None] | None = None,
        session: Callable[[Connection, float], Awaitable[bool]] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.ssl = ssl
        self.signer = signer
        self.session = session
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.codec = codec if codec is not None else default_codec(max_frame_size)
        self.backoff_max = backoff_max
        self._conns: dict[str, Connection] = {}
        #: ``connection_if_any(addr)``: the connection to ``addr`` if one was made (it may be closing:
        #: ``send_request`` says so), else None. The send hot path: the dict's own ``get``.
        self.connection_if_any: Callable[[str], Connection | None] = self._conns.get
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._backoff: dict[str, Backoff] = {}
        #: why the last connect to an address failed (repeated while backing off from it)
        self._last_failure: dict[str, str] = {}
        self._closed = False

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        if self._closed:
            raise ClosedError("rpc client is closed")
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            conn = await self._connect(addr)
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc if isinstance(exc, Exception) else ConnectError(str(exc)))
                fut.exception()  # mark retrieved: other waiters may be absent
            raise
        else:
            fut.set_result(conn)
            return conn
        finally:
            self._connecting.pop(addr, None)

    async def _connect(self, addr: str) -> Connection:
        backoff = self._backoff.setdefault(addr, Backoff(maximum=self.backoff_max))
        now = time.monotonic()
        wait = backoff.remaining(now)
        if wait > 0:
            cause = self._last_failure.get(addr, "a failure")
            raise ConnectError(f"cannot connect to {addr}: {cause} (backing off for {wait:.2f}s)")
        host, port = split_addr(addr)
        ctx = self._tls_for(addr)
        loop = asyncio.get_running_loop()
        try:
            _, conn = await wait_within(
                loop.create_connection(
                    lambda: Connection(self.dispatcher, self.codec),
                    host,
                    port,
                    family=socket.AF_INET,
                    ssl=ctx,
                ),
                timeout=self.connect_timeout,
            )
        except _ssl.SSLError as exc:
            backoff.failed(time.monotonic())
            self._last_failure[addr] = f"TLS handshake failed: {exc.reason or exc}"
            raise ConnectError(f"TLS handshake with {addr} failed: {exc.reason or exc}") from exc
        except (OSError, TimeoutError) as exc:
            backoff.failed(time.monotonic())
            hint = " (is it a plaintext port?)" if ctx is not None and isinstance(exc, ConnectionError) else ""
            self._last_failure[addr] = f"{exc or type(exc).__name__}{hint}"
            raise ConnectError(f"cannot connect to {addr}: {exc or type(exc).__name__}{hint}") from exc
        conn.signer = self.signer
        if self.signer is not None and self.session is not None:
            await self._open_session(conn, addr)
        backoff.succeeded()
        self._last_failure.pop(addr, None)
        self._conns[addr] = conn
        conn.attrs["addr"] = addr
        conn.add_close_callback(self._forget)
        if self._closed:
            conn.close()
            raise ClosedError("rpc client is closed")
        return conn

    async def _open_session(self, conn: Connection, addr: str) -> None:
        """Run ``session`` on a new connection: its later requests go unsigned if it says so."""
        assert self.session is not None
        try:
            if await self.session(conn, self.connect_timeout):
                conn.signer = None  # the connection is authenticated: requests need no signature
        except BaseException as exc:
            conn.close()
            if isinstance(exc, Exception) and not isinstance(exc, ConnectError):
                raise ConnectError(f"cannot open a session with {addr}: {exc}") from exc
            raise

    def _tls_for(self, addr: str) -> _ssl.SSLContext | None:
        if self.ssl is not None:
            return self.ssl
        if split_scheme(addr)[1]:
            self.ssl = client_context()  # tls:// with no context given: the system CAs
            return self.ssl
        return None

    def _forget(self, conn: Connection) -> None:
        addr = conn.attrs.get("addr")
        if addr is not None and self._conns.get(addr) is conn:
            del self._conns[addr]

    async def invoke(self, addr: str, cmd: Command, timeout: float = 3.0) -> Command:
        """Send a request and return the response, whatever its code."""
        conn = self._conns.get(addr)
        if conn is None or not conn.is_open:
            conn = await self.connection(addr)
        return await conn.request(cmd, timeout)

    async def invoke_ok(self, addr: str, cmd: Command, timeout: float = 3.0, ok: tuple[int, ...] = (0,)) -> Command:
        """Like :meth:`invoke`, but raise the mapped :class:`~pymq.errors.RemoteError` unless the code is in ``ok``."""
        resp = await self.invoke(addr, cmd, timeout)
        if resp.code not in ok:
            raise error_for_response(resp.code, resp.remark, addr)
        return resp

    async def invoke_oneway(self, addr: str, cmd: Command) -> None:
        conn = self._conns.get(addr)
        if conn is None or not conn.is_open:
            conn = await self.connection(addr)
        await conn.send_oneway(cmd)

    def is_connected(self, addr: str) -> bool:
        conn = self._conns.get(addr)
        return conn is not None and conn.is_open

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                await wait_within(asyncio.shield(conn.closed), timeout=1.0)
            except TimeoutError:
                conn.abort()

    async def __aenter__(self) -> RpcClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["Backoff", "ConnectionClosedError", "RpcClient", "split_addr"]
