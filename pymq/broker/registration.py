"""Keeping every nameserver informed: register at start, every interval and after topic changes.

A :class:`~pymq.broker.service.Service`: ``start`` registers with every nameserver and
keeps doing so; ``stop`` stops that and unregisters (before the broker stops serving).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.errors import PymqError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import RegisterBrokerRequest, RegisterBrokerResponse, UnregisterBrokerRequest
from pymq.tasks import wait_within
from pymq.transport.client import RpcClient

if TYPE_CHECKING:
    from pymq.broker.topics import TopicConfigManager
    from pymq.config import BrokerConfig

log = get_logger("broker.registration")

#: a nameserver that keeps refusing registration is logged at once, then at most this often
REGISTER_FAILED_LOG_SECONDS = 60.0
#: what a failed registration means, in its log line
UNREACHABLE = "clients using this nameserver cannot find this broker until it registers there"


class NamesrvRegistrar:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        client: RpcClient,
        address: Callable[[], str],
        ha_address: Callable[[], str] | None = None,
        *,
        broker_id: Callable[[], int],
    ) -> None:
        self.config = config
        #: the id this broker registers under (the role's: 0 while master)
        self.broker_id = broker_id
        #: a master's HA listener address (announced as haServerAddr), if it has one
        self.ha_address = ha_address
        self.topics = topics
        self.client = client
        #: the broker's advertised address (known once it has bound its port)
        self.address = address
        self.master_addr: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._registered = False
        #: nameserver -> (when its failure was last logged, failures since then not logged)
        self._failing: dict[str, tuple[float, int]] = {}

    def _register_header(self) -> RegisterBrokerRequest:
        cfg, addr = self.config, self.address()
        return RegisterBrokerRequest(
            broker_addr=addr,
            broker_name=cfg.broker_name,
            cluster_name=cfg.cluster_name,
            broker_id=self.broker_id(),
            ha_server_addr=(self.ha_address() if self.ha_address is not None else "") or addr,
        )

    async def register_all(self) -> int:
        """Register with every nameserver at once; returns how many accepted."""
        body = encode_body({"topicConfigTable": self.topics.table(), "dataVersion": self.topics.data_version})
        ext = self._register_header().to_ext()
        results = await asyncio.gather(
            *(self._register_one(addr, ext, body) for addr in self.config.namesrv_addrs),
            return_exceptions=True,
        )
        return sum(1 for r in results if r is True)

    async def _register_one(self, addr: str, ext: dict[str, object], body: bytes) -> bool:
        try:
            resp = await self.client.invoke_ok(
                addr, Command.request(RequestCode.REGISTER_BROKER, dict(ext), body), timeout=3.0
            )
        except PymqError as exc:
            self._failed(addr, str(exc))
            return False
        if self._failing.pop(addr, None) is not None:
            log.info("registered", namesrv=addr, after="failures")
        master = RegisterBrokerResponse.from_ext(resp.ext).master_addr
        if master and master != self.master_addr:
            self.master_addr = master
            log.info("master_discovered", master=master)
        return True

    def _failed(self, addr: str, reason: str) -> None:
        """Log a failed registration at once, then at most every REGISTER_FAILED_LOG_SECONDS per nameserver."""
        now = time.monotonic()
        last = self._failing.get(addr)
        if last is not None and now - last[0] < REGISTER_FAILED_LOG_SECONDS:
            self._failing[addr] = (last[0], last[1] + 1)
            return
        self._failing[addr] = (now, 0)
        fields: dict[str, object] = {"namesrv": addr, "reason": reason, "effect": UNREACHABLE}
        if last is not None:
            fields["failures_not_logged"] = last[1]
            fields["log_every_seconds"] = REGISTER_FAILED_LOG_SECONDS
        log.warning("register_failed", **fields)

    async def unregister_all(self) -> None:
        cfg = self.config
        ext = UnregisterBrokerRequest(
            broker_addr=self.address(),
            broker_name=cfg.broker_name,
            cluster_name=cfg.cluster_name,
            broker_id=self.broker_id(),
        ).to_ext()

        async def one(addr: str) -> None:
            try:
                await self.client.invoke_ok(
                    addr, Command.request(RequestCode.UNREGISTER_BROKER, dict(ext)), timeout=2.0
                )
            except PymqError as exc:
                log.warning("unregister_failed", namesrv=addr, reason=str(exc))

        await asyncio.gather(*(one(a) for a in cfg.namesrv_addrs))

    def trigger(self) -> None:
        """Register soon (a topic changed)."""
        self._wakeup.set()

    async def start(self) -> None:
        """Register everywhere now, then every interval and after each topic change."""
        self._registered = True
        await self.register_all()
        self._task = asyncio.create_task(self._loop(), name="broker-register")

    async def _loop(self) -> None:
        interval = self.config.register_interval_seconds
        while True:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await wait_within(self._wakeup.wait(), timeout=interval)
            self._wakeup.clear()
            await self.register_all()

    async def pause(self) -> None:
        """Stop registering without unregistering (a fenced master: its successor takes its place)."""
        task, self._task = self._task, None
        if task is not None:
            await _cancel(task)

    async def resume(self) -> None:
        """Register at once and keep doing so (after a role change: with the new broker id)."""
        await self.pause()
        self._registered = True
        await self.register_all()
        self._task = asyncio.create_task(self._loop(), name="broker-register")

    async def stop(self) -> None:
        """Stop registering and unregister from every nameserver (up to 3 s)."""
        task, self._task = self._task, None
        if task is not None:
            await _cancel(task)
        if self._registered:
            self._registered = False
            with contextlib.suppress(Exception):
                await wait_within(self.unregister_all(), timeout=3.0)


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel the registration loop and wait for it to end.

    Cancel again if it keeps running (a belt to :func:`pymq.tasks.wait_within`'s braces: on
    Python 3.11 ``asyncio.wait_for`` swallowed a cancellation that landed as its inner wait
    completed, and awaiting such a task never returned).
    """
    for _ in range(20):
        task.cancel()
        done, _pending = await asyncio.wait({task}, timeout=0.25)
        if done:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
            return
    log.error("registration_loop_did_not_stop")
