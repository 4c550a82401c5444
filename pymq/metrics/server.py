"""A minimal HTTP endpoint for a metrics registry, served on the daemon's own event loop.

Scrapes run on the loop thread, so collectors read the daemon's state without locks and
without racing the handlers that change it. ``GET /metrics`` (or ``/``) answers the text
format (OpenMetrics when asked for), gzipped when the scraper accepts it; ``GET /-/healthy``
answers ``OK``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import ssl as ssl_module
from typing import Any
from urllib.parse import urlsplit

from pymq.errors import ConfigError
from pymq.logs import get_logger
from pymq.tasks import wait_within

log = get_logger("metrics")

_READ_TIMEOUT = 10.0
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    sock.setblocking(False)
    return sock


class MetricsServer:
    """The handle the daemons keep: ``.port`` is the bound port, ``.close()`` stops serving."""

    def __init__(
        self, registry: Any, host: str, port: int, *, name: str = "metrics", ssl: ssl_module.SSLContext | None = None
    ) -> None:
        from prometheus_client.exposition import choose_encoder

        self.registry = registry
        self.host = host
        self.name = name
        #: HTTPS when set (``[tls] metrics``)
        self.ssl = ssl
        self._choose_encoder = choose_encoder
        self._sock = _listen(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.base_events.Server | None = None
        self._dispatcher: Any = None
        self._interceptor: Any = None
        self._task = asyncio.get_running_loop().create_task(self._start(), name=f"{name}-metrics-server")
        log.info("metrics_listening", daemon=name, host=host, port=self.port, url=self.url)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        scheme = "https" if self.ssl is not None else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}/metrics"

    def attach_interceptor(self, dispatcher: Any, interceptor: Any) -> None:
        """Add ``interceptor`` (request metrics) to the dispatcher until :meth:`close`."""
        dispatcher.add_interceptor(interceptor)
        self._dispatcher, self._interceptor = dispatcher, interceptor

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, sock=self._sock, ssl=self.ssl)

    def close(self) -> None:
        """Stop listening and drop open scrape connections (synchronous; safe to call twice)."""
        if self._dispatcher is not None:
            self._dispatcher.remove_interceptor(self._interceptor)
        self._dispatcher = self._interceptor = None
        if not self._task.done():
            self._task.cancel()
        if self._server is not None:
            self._server.close()
            self._server = None
        self._sock.close()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                head = await wait_within(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            status, headers, body, method = self._respond(head)
            lines = [f"HTTP/1.1 {status} {_REASONS[status]}", *(f"{k}: {v}" for k, v in headers.items())]
            lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
            writer.write("\r\n".join(lines).encode("latin-1"))
            if method != "HEAD":
                writer.write(body)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.close()

    def _respond(self, head: bytes) -> tuple[int, dict[str, str], bytes, str]:
        text = head.decode("latin-1").split("\r\n")
        parts = text[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, {"Content-Type": "text/plain"}, b"bad request\n", ""
        method, target = parts[0], parts[1]
        headers = {}
        for line in text[1:]:
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        path = urlsplit(target).path
        if method not in ("GET", "HEAD"):
            return 405, {"Content-Type": "text/plain", "Allow": "GET, HEAD"}, b"method not allowed\n", method
        if path == "/-/healthy":
            return 200, {"Content-Type": "text/plain"}, b"OK\n", method
        if path not in ("/", "/metrics"):
            return 404, {"Content-Type": "text/plain"}, b"not found: try /metrics\n", method
        encoder, content_type = self._choose_encoder(headers.get("accept", ""))
        try:
            body = encoder(self.registry)
        except Exception as exc:
            log.exception("metrics_collect_failed", daemon=self.name)
            return 500, {"Content-Type": "text/plain"}, f"collect failed: {exc}\n".encode(), method
        out = {"Content-Type": content_type}
        if "gzip" in headers.get("accept-encoding", ""):
            body = gzip.compress(body, compresslevel=1)
            out["Content-Encoding"] = "gzip"
        return 200, out, body, method
