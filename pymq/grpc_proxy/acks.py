"""AckMessage through the proxy: the acks of all 5.x clients of a group, coalesced per broker.

RocketMQ 5 clients ack one message per AckMessage call (the Java SimpleConsumer's ``ack``), so
many receivers put as many calls on the proxy at once. Each goes through one
:class:`~pymq.client.ack_coalescer.AckCoalescer` per consumer group: the acks of one loop turn
(and those made while the previous request waits) become one BATCH_ACK_MESSAGE per broker and
topic. Each call still gets its own entry's outcome. The proxy signs its broker requests as
itself, whichever client asked, so merging clients' acks grants nobody anything: each call's
permission was checked by the proxy's ACL before it got here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from pymq.client import broker_api
from pymq.client.ack_coalescer import AckCoalescer
from pymq.errors import error_for_response
from pymq.protocol.codes import ResponseCode
from pymq.protocol.requests import MAX_BATCH_ACK

#: ``invoke(address, request)``: the broker's answer
Invoke = Callable[[str, Any], Awaitable[Any]]


class ProxyAcks:
    """One coalescer per consumer group; :meth:`ack` raises what the broker answered for that handle."""

    def __init__(self, invoke: Invoke) -> None:
        self._invoke = invoke
        self._by_group: dict[str, AckCoalescer] = {}

    async def ack(self, addr: str, group: str, topic: str, handle: str) -> None:
        coalescer = self._by_group.get(group)
        if coalescer is None:
            coalescer = self._by_group[group] = AckCoalescer(partial(self._send, group))
        await coalescer.ack(addr, topic, handle)

    async def _send(self, group: str, addr: str, topic: str, handles: list[str]) -> list[BaseException | None]:
        if len(handles) == 1:
            resp = await self._invoke(addr, broker_api.ack_message(group, topic, handles[0]))
            ok = resp.code == ResponseCode.SUCCESS
            return [None if ok else error_for_response(resp.code, resp.remark, addr)]
        out: list[BaseException | None] = []
        for start in range(0, len(handles), MAX_BATCH_ACK):
            resp = await self._invoke(addr, broker_api.batch_ack(group, topic, handles[start : start + MAX_BATCH_ACK]))
            if resp.code != ResponseCode.SUCCESS:
                raise error_for_response(resp.code, resp.remark, addr)
            out += [
                None if code == ResponseCode.SUCCESS else error_for_response(code, remark, addr)
                for code, remark in broker_api.read_batch_ack(resp)
            ]
        return out
