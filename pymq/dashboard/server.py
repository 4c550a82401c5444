"""``DashboardServer``: uvicorn serving the dashboard inside our event loop, as a daemon object
(``start``/``address``/``close``, like the nameserver and broker apps)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator

import uvicorn

from pymq.config import DashboardConfig
from pymq.dashboard.app import create_app
from pymq.errors import ConfigError


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """The daemon around us owns SIGTERM/SIGINT (uvicorn would take them over)."""
        yield


class DashboardServer:
    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.app = create_app(config)
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.address = ""

    @property
    def url(self) -> str:
        return f"http://{self.address}/"

    async def start(self) -> None:
        """Bind the port (0: any free one), start serving, return once the app has started."""
        try:
            sock = socket.create_server((self.config.host, self.config.port), reuse_port=False)
        except OSError as exc:
            raise ConfigError(
                f"dashboard cannot listen on {self.config.host}:{self.config.port}: {exc.strerror}"
            ) from exc
        host, port = sock.getsockname()[:2]
        self.address = f"{host}:{port}"
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="on", loop="none")
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="dashboard-http")
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise ConfigError("the dashboard stopped while starting")
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.gather(self._task, return_exceptions=True)
