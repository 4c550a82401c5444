"""One PULL_MESSAGE round trip: build the request, map the answer, decode the records."""

from __future__ import annotations

from dataclasses import dataclass, field

from pymq.client.consumer_types import PullStatus
from pymq.client.instance import ClientInstance
from pymq.errors import NoRouteError, error_for_response
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.filter import Subscription
from pymq.protocol.frame import Command
from pymq.protocol.message import MessageExt, Prop, iter_messages
from pymq.protocol.requests import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND, RETRY_PREFIX
from pymq.protocol.route import MessageQueue

_STATUS = {
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
    flags = FLAG_SUBSCRIPTION
    if commit_offset >= 0:
        flags |= FLAG_COMMIT_OFFSET
    if suspend_ms > 0:
        flags |= FLAG_SUSPEND
    ext = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": mq.queueId,
        "queueOffset": offset,
        "maxMsgNums": max_nums,
        "sysFlag": flags,
        "commitOffset": commit_offset,
        "suspendTimeoutMillis": suspend_ms,
        "subscription": sub.expression,
        "subVersion": sub.version,
    }
    resp = await instance.rpc.invoke(addr, Command.request(RequestCode.PULL_MESSAGE, ext), timeout)
    status = _STATUS.get(resp.code)
    if status is None:
        raise error_for_response(resp.code, resp.remark, addr)
    e = resp.ext
    result = PullResult(
        status, int(e.get("nextBeginOffset", offset)), int(e.get("minOffset", 0)), int(e.get("maxOffset", 0))
    )
    if status is PullStatus.FOUND:
        result.messages = decode_pulled(resp.body, mq, sub)
    return result


def decode_pulled(body: bytes | memoryview, mq: MessageQueue, sub: Subscription) -> list[MessageExt]:
    msgs = []
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
