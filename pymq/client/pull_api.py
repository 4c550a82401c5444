"""One PULL_MESSAGE round trip: build the request, map the answer, decode the records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from pymq.client import broker_api
from pymq.client.consumer_types import PullStatus
from pymq.client.instance import ClientInstance
from pymq.errors import NoRouteError, error_for_response
from pymq.protocol.codes import ResponseCode
from pymq.protocol.filter import Subscription
from pymq.protocol.message import MessageExt, Prop, iter_messages
from pymq.protocol.requests import RETRY_PREFIX
from pymq.protocol.route import MessageQueue

_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)


async def pull(
    instance: ClientInstance,
    mq: MessageQueue,
    group: str,
    offset: int,
    sub: Subscription,
    *,
    max_nums: int = 32,
    commit_offset: int = -1,
    suspend_ms: int = 0,
    timeout: float = 30.0,
) -> PullResult:
    """Pull from ``mq`` at ``offset``; messages not matching ``sub``'s tags are dropped here."""
    addr = instance.broker_addr(mq.brokerName, master_only=False)
    if addr is None:
        await instance.update_route(mq.topic)
        addr = instance.broker_addr(mq.brokerName, master_only=False)
        if addr is None:
            raise NoRouteError(f"no address for broker {mq.brokerName}")
    cmd = broker_api.pull_message(
        group,
        mq,
        offset,
        max_nums=max_nums,
        subscription=sub,
        commit_offset=commit_offset,
        suspend_ms=suspend_ms,
    )
    resp = await instance.rpc.invoke(addr, cmd, timeout)
    status = _STATUS.get(resp.code)
    if status is None:
        raise error_for_response(resp.code, resp.remark, addr)
    result = PullResult(status, *broker_api.read_pull_offsets(resp, offset))
    if status is PullStatus.FOUND:
        # A received body is one buffer (bytes or a view of the read buffer), never a list of them.
        result.messages = decode_pulled(cast(bytes | memoryview, resp.body), mq, sub)
    return result


def decode_pulled(body: bytes | memoryview, mq: MessageQueue, sub: Subscription) -> list[MessageExt]:
    msgs: list[MessageExt] = []
    tags = sub.tags
    retry = mq.topic.startswith(RETRY_PREFIX)
    for m in iter_messages(body, broker_name=mq.brokerName):
        if tags and m.properties.get(Prop.TAGS) not in tags:
            continue
        if retry:
            # Listeners see the topic the message was first sent to.
            original = m.properties.get(Prop.RETRY_TOPIC)
            if original:
                m.topic = original
        msgs.append(m)
    return msgs
