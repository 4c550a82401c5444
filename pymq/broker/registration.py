"""Keeping every nameserver informed: register at start, every interval and after topic changes."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from pymq.errors import PymqError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import encode_body
from pymq.transport.client import RpcClient

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp

log = get_logger("broker.registration")


class NamesrvRegistrar:
    def __init__(self, app: BrokerApp, client: RpcClient) -> None:
        self.app = app
        self.client = client
        self.master_addr: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()

    def _header(self) -> dict[str, object]:
        cfg = self.app.config
        return {
            "brokerAddr": self.app.address,
            "brokerName": cfg.broker_name,
            "clusterName": cfg.cluster_name,
            "brokerId": cfg.broker_id,
            "haServerAddr": self.app.address,
        }

    async def register_all(self) -> int:
        """Register with every nameserver at once; returns how many accepted."""
        body = encode_body({"topicConfigTable": self.app.topics.table(), "dataVersion": self.app.topics.data_version})
        results = await asyncio.gather(
            *(self._register_one(addr, body) for addr in self.app.config.namesrv_addrs),
            return_exceptions=True,
        )
        return sum(1 for r in results if r is True)

    async def _register_one(self, addr: str, body: bytes) -> bool:
        try:
            resp = await self.client.invoke_ok(
                addr, Command.request(RequestCode.REGISTER_BROKER, self._header(), body), timeout=3.0
            )
        except PymqError as exc:
            log.warning("register_failed", namesrv=addr, reason=str(exc))
            return False
        master = resp.ext.get("masterAddr")
        if master and master != self.master_addr:
            self.master_addr = master
            log.info("master_discovered", master=master)
        return True

    async def unregister_all(self) -> None:
        async def one(addr: str) -> None:
            try:
                await self.client.invoke_ok(
                    addr, Command.request(RequestCode.UNREGISTER_BROKER, self._header()), timeout=2.0
                )
            except PymqError as exc:
                log.warning("unregister_failed", namesrv=addr, reason=str(exc))

        await asyncio.gather(*(one(a) for a in self.app.config.namesrv_addrs))

    def trigger(self) -> None:
        """Register soon (a topic changed)."""
        self._wakeup.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="broker-register")

    async def _loop(self) -> None:
        interval = self.app.config.register_interval_seconds
        while True:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=interval)
            self._wakeup.clear()
            await self.register_all()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
