"""Asking the nameservers: routes, cluster info, topic lists — trying each address in turn."""

from __future__ import annotations

import random
from typing import Any

from pymq.client import broker_api
from pymq.errors import PymqError, TopicNotExistError, TransportError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.route import TopicRouteData
from pymq.transport.client import RpcClient


def parse_addrs(namesrv: str | list[str]) -> list[str]:
    """``"a:9876;b:9876"`` (or a list) -> addresses; ``,`` also separates."""
    parts = namesrv.replace(",", ";").split(";") if isinstance(namesrv, str) else list(namesrv)
    addrs = [p.strip() for p in parts if p and p.strip()]
    if not addrs:
        raise ValueError("at least one nameserver address (host:port) is required")
    return addrs


class NamesrvClient:
    """Sends each request to one nameserver, moving on to the next when one is unreachable."""

    def __init__(self, rpc: RpcClient, addrs: list[str], timeout: float = 3.0) -> None:
        self.rpc = rpc
        self.addrs = list(addrs)
        self.timeout = timeout
        self._start = random.randrange(len(self.addrs))

    async def invoke(self, cmd: Command) -> Command:
        last: Exception | None = None
        n = len(self.addrs)
        for i in range(n):
            addr = self.addrs[(self._start + i) % n]
            try:
                resp = await self.rpc.invoke_ok(
                    addr, Command(cmd.code, 0, 0, None, dict(cmd.ext), cmd.body), self.timeout
                )
            except TransportError as exc:
                last = exc
                continue
            self._start = (self._start + i) % n  # stick with the one that answered
            return resp
        assert last is not None
        raise last

    async def route(self, topic: str) -> TopicRouteData:
        """The topic's route; raises :class:`TopicNotExistError` when no nameserver knows it."""
        resp = await self.invoke(broker_api.topic_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic))
        data = decode_body(resp.body, "route")
        try:
            return TopicRouteData.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise PymqError(f"bad route data for {topic}: {exc}") from exc

    async def route_or_none(self, topic: str) -> TopicRouteData | None:
        try:
            return await self.route(topic)
        except TopicNotExistError:
            return None

    async def cluster_info(self) -> dict[str, Any]:
        resp = await self.invoke(broker_api.plain(RequestCode.GET_BROKER_CLUSTER_INFO))
        info: dict[str, Any] = decode_body(resp.body, "cluster info")
        return info

    async def topics(self) -> list[str]:
        resp = await self.invoke(broker_api.plain(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        return list(decode_body(resp.body, "topic list").get("topicList", []))
