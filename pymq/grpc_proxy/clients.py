"""5.x clients registered with the brokers on their behalf, as RocketMQ's proxy does.

A 5.x client talks only to the front end; the brokers would never hear of it, and
``consumer-connection``, ``producer-connection`` and the dashboard would not list it. So the
front end heartbeats to the brokers for each client (pymq's HEART_BEAT on its own connection,
client id = the client's ``x-mq-client-id``, language from ``x-mq-language``, protocol "grpc"):
at once when its Telemetry settings arrive, then at every Heartbeat it sends (every 10 s). It
unregisters the client on NotifyClientTermination, when the client's last Telemetry stream
ends, and when the client has been silent for ``expiry_s`` (less than the brokers' own channel
expiry, which would close the front end's connection, and with it every other client's entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymq.client import broker_api
from pymq.errors import PymqError
from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.filter import Subscription
from pymq.protocol.headers import encode_body
from pymq.protocol.route import MASTER_ID

log = logging.getLogger("pymq.grpc_proxy.clients")


@dataclass
class ProxiedClient:
    """What the front end knows of one 5.x client (from its settings and headers)."""

    client_id: str
    client_type: int
    language: str
    #: RocketMQ's version code of the client's version (0: unknown)
    version: int = 0
    group: str = ""
    topics: list[str] = field(default_factory=list)
    subscriptions: list[Subscription] = field(default_factory=list)
    last_seen: float = 0.0
    #: open Telemetry streams (the client is unregistered when the last one ends)
    streams: int = 0
    #: broker addresses it was registered with (unregistered there)
    brokers: set[str] = field(default_factory=set)

    def groups(self) -> tuple[str | None, list[str]]:
        """(consumer group or None, producer groups) as registered with the brokers."""
        if self.client_type == pb.PRODUCER:
            return None, list(self.topics)
        return self.group or None, []

    def heartbeat(self) -> Command:
        body = mapping.heartbeat_body(
            self.client_id,
            self.client_type,
            language=self.language,
            version=self.version,
            producer_topics=self.topics,
            group=self.group,
            subs=self.subscriptions,
        )
        return Command.request(RequestCode.HEART_BEAT, body=encode_body(body))


def metadata(context: Any) -> dict[str, str]:
    """A call's request headers (lower-case keys); empty when there is no context (direct calls in tests)."""
    if context is None:
        return {}
    try:
        items = context.invocation_metadata() or ()
    except (AttributeError, RuntimeError):
        return {}
    out: dict[str, str] = {}
    for key, value in items:
        if isinstance(value, bytes):
            continue  # binary headers (-bin) are not among the ones read here
        out[str(key).lower()] = str(value)
    return out


class ClientRegistry:
    """The 5.x clients this front end has registered with the brokers, by client id."""

    def __init__(
        self,
        instance: Callable[[], Any],
        *,
        expiry_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._instance = instance
        self.expiry_s = expiry_s
        self.clock = clock
        self.clients: dict[str, ProxiedClient] = {}
        self._sweeper: asyncio.Task[None] | None = None
        #: set by close(): late stream ends and heartbeats then change nothing (the client instance is gone)
        self.closed = False

    # --- what the service calls -----------------------------------------------------------------------------

    async def settings(self, client_id: str, headers: dict[str, str], settings: pb.Settings) -> None:
        """Telemetry settings arrived: (re)describe the client and register it at once."""
        if not client_id or self.closed:
            return
        language = mapping.client_language(
            headers.get("x-mq-language", ""), settings.user_agent if settings.HasField("user_agent") else None
        )
        c = self.clients.get(client_id)
        if c is None:
            c = self.clients[client_id] = ProxiedClient(client_id, settings.client_type, language)
        old_consumer, old_producers = c.groups()
        c.client_type, c.language = settings.client_type, language
        agent_version = settings.user_agent.version if settings.HasField("user_agent") else ""
        c.version = mapping.client_version_code(headers.get("x-mq-client-version", "") or agent_version)
        if settings.client_type == pb.PRODUCER:
            c.topics = sorted({t.name for t in settings.publishing.topics if t.name})
        else:
            c.group = settings.subscription.group.name or c.group
            c.subscriptions = mapping.subscriptions(settings)
            c.topics = sorted({s.topic for s in c.subscriptions})
        c.last_seen = self.clock()
        new_consumer, new_producers = c.groups()
        gone = [g for g in old_producers if g not in new_producers]
        if gone or (old_consumer and old_consumer != new_consumer):
            await self._unregister(c, old_consumer if old_consumer != new_consumer else None, gone)
        await self._register(c)

    async def heartbeat(self, client_id: str, client_type: int, group: str) -> None:
        """The client's Heartbeat: keep it registered (a client whose settings never came is not registered)."""
        c = self.clients.get(client_id)
        if c is None or self.closed:
            return
        c.last_seen = self.clock()
        if client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER) and group and group != c.group:
            if c.group:
                await self._unregister(c, c.group, [])
            c.group = group
        await self._register(c)

    def stream_opened(self, client_id: str) -> None:
        c = self.clients.get(client_id)
        if c is not None:
            c.streams += 1

    async def stream_closed(self, client_id: str) -> None:
        c = self.clients.get(client_id)
        if c is None or self.closed:
            return
        c.streams -= 1
        if c.streams <= 0:
            await self.remove(client_id, "its telemetry stream ended")

    async def remove(self, client_id: str, why: str) -> None:
        """Unregister the client from every broker it was registered with, and forget it."""
        c = self.clients.pop(client_id, None)
        if c is None:
            return
        consumer, producers = c.groups()
        log.info("5.x client %s unregistered: %s", client_id, why)
        await self._unregister(c, consumer, producers)

    # --- expiry ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_loop())

    async def close(self) -> None:
        """Stop sweeping and unregister every client (while the front end's client instance still runs)."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        for client_id in list(self.clients):
            await self.remove(client_id, "the front end is closing")
        self.closed = True

    async def sweep(self) -> list[str]:
        """Unregister the clients silent for longer than ``expiry_s``; their ids."""
        deadline = self.clock() - self.expiry_s
        stale = [cid for cid, c in self.clients.items() if c.last_seen < deadline]
        for cid in stale:
            await self.remove(cid, f"no heartbeat for {self.expiry_s:g} s")
        return stale

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.05, min(5.0, self.expiry_s / 4)))
            try:
                await self.sweep()
            except Exception:  # a sweep must not end the loop
                log.exception("sweeping 5.x clients failed")

    # --- the brokers ----------------------------------------------------------------------------------------

    async def _targets(self, c: ProxiedClient) -> set[str]:
        """The brokers of the client's topics: masters for a producer, every member for a consumer."""
        inst = self._instance()
        out: set[str] = set()
        for topic in c.topics:
            route = inst.routes.route(topic)
            if route is None:
                try:
                    route = await inst.update_route(topic)
                except PymqError:
                    route = None
            if route is None:
                continue
            for bd in route.brokerDatas:
                for bid, addr in bd.brokerAddrs.items():
                    if bid == MASTER_ID or c.client_type != pb.PRODUCER:
                        out.add(addr)
        return out

    async def _register(self, c: ProxiedClient) -> None:
        targets = await self._targets(c)
        if not targets:
            return
        inst = self._instance()
        cmd = c.heartbeat()

        async def one(addr: str) -> None:
            try:
                await inst.rpc.invoke_ok(addr, cmd, inst.config.rpc_timeout_seconds)
                c.brokers.add(addr)
            except PymqError as exc:
                log.debug("heartbeat for 5.x client %s to %s failed: %s", c.client_id, addr, exc)

        await asyncio.gather(*(one(a) for a in sorted(targets)))

    async def _unregister(self, c: ProxiedClient, consumer: str | None, producers: list[str]) -> None:
        inst = self._instance()
        cmds = [broker_api.unregister_client(c.client_id, None, consumer)] if consumer else []
        cmds += [broker_api.unregister_client(c.client_id, g, None) for g in producers]
        if not cmds:
            return

        async def one(addr: str) -> None:
            for cmd in cmds:
                with contextlib.suppress(PymqError, TimeoutError):
                    await inst.rpc.invoke_ok(addr, cmd, 2.0)

        await asyncio.gather(*(one(a) for a in sorted(c.brokers)))


__all__ = ["ClientRegistry", "ProxiedClient", "metadata"]
