"""The message types each topic accepts, from its ``message.type`` attribute, cached for a few seconds.

RocketMQ 5's proxy checks every SendMessage against the topic's ``message.type``
(NORMAL/FIFO/DELAY/TRANSACTION/MIXED) and tells clients the accepted types in QueryRoute. The
front end reads the attributes with GET_ALL_TOPIC_CONFIG from a master of the topic (one call
fills the cache for every topic of that broker) and keeps them ``ttl_s`` seconds, so a send
costs a dict lookup. When the attributes cannot be read, every type is accepted (the broker
still checks what it checks).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pymq.client import broker_api
from pymq.errors import PymqError
from pymq.grpc_proxy import mapping
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.headers import decode_body

log = logging.getLogger("pymq.grpc_proxy.topic_types")


class TopicTypes:
    """topic -> accepted v2 message types (see :func:`mapping.message_types`)."""

    def __init__(
        self,
        instance: Callable[[], Any],
        *,
        ttl_s: float = 10.0,
        unset_is_normal: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._instance = instance
        self.ttl_s = ttl_s
        self.unset_is_normal = unset_is_normal
        self.clock = clock
        #: topic -> (accepted types, when read)
        self._types: dict[str, tuple[list[int], float]] = {}
        #: broker address -> the call reading its topic configs (one at a time per broker)
        self._loading: dict[str, asyncio.Future[None]] = {}

    async def accepted(self, topic: str) -> list[int]:
        """The types ``topic`` accepts (every type while its attributes cannot be read)."""
        hit = self._types.get(topic)
        if hit is not None and self.clock() - hit[1] < self.ttl_s:
            return hit[0]
        addr = await self._master_of(topic)
        if addr is not None:
            await self._load(addr)
            hit = self._types.get(topic)
            if hit is not None:
                return hit[0]
        return mapping.message_types({})

    async def _master_of(self, topic: str) -> str | None:
        inst = self._instance()
        route = inst.routes.route(topic)
        if route is None:
            try:
                route = await inst.update_route(topic)
            except PymqError:
                return None
        if route is None:
            return None
        for bd in sorted(route.brokerDatas, key=lambda b: b.brokerName):
            if bd.master_addr:
                return str(bd.master_addr)
        return None

    async def _load(self, addr: str) -> None:
        running = self._loading.get(addr)
        if running is not None:
            await asyncio.shield(running)
            return
        fut: asyncio.Future[None] = asyncio.ensure_future(self._read(addr))
        self._loading[addr] = fut  # _read removes it when its call is answered
        await asyncio.shield(fut)

    async def _read(self, addr: str) -> None:
        inst = self._instance()
        try:
            resp = await inst.rpc.invoke(
                addr, broker_api.plain(RequestCode.GET_ALL_TOPIC_CONFIG), inst.config.rpc_timeout_seconds
            )
        except (PymqError, TimeoutError) as exc:
            log.warning("cannot read topic attributes from %s: %s", addr, exc)
            return
        finally:
            self._loading.pop(addr, None)
        if resp.code != ResponseCode.SUCCESS:
            log.warning("cannot read topic attributes from %s: %s %s", addr, resp.code, resp.remark)
            return
        now = self.clock()
        table = decode_body(resp.body).get("topicConfigTable") or {}
        for topic, config in table.items():
            attrs = {str(k): str(v) for k, v in (config.get("attributes") or {}).items()}
            self._types[str(topic)] = (mapping.message_types(attrs, unset_is_normal=self.unset_is_normal), now)


__all__ = ["TopicTypes"]
