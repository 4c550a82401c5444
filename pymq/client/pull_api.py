"""One PULL_MESSAGE round trip: build the request, map the answer, decode the records.

Where a queue is pulled from is RocketMQ's: its master, or the broker id the last answer
suggested (:class:`PullNodes`), or a slave of the same broker name while the route has no
master. A pull to a slave never carries the commit flag (offsets belong to the master).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from pymq.client import broker_api
from pymq.client.consumer_types import PullStatus
from pymq.client.instance import ClientInstance
from pymq.errors import NoRouteError, PymqError, TransportError, error_for_response
from pymq.protocol.codes import ResponseCode
from pymq.protocol.filter import Subscription
from pymq.protocol.message import MessageExt, Prop, iter_messages
from pymq.protocol.requests import RETRY_PREFIX
from pymq.protocol.route import MASTER_ID, MessageQueue

_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullNodes:
    """Which broker of each queue's group to pull from next (RocketMQ's ``pullFromWhichNodeTable``).

    Pull answers carry ``suggestWhichBrokerId``: a master suggests a slave (1) to a consumer
    far behind, and a slave suggests the master back once it has caught up. With ``follow``
    off every pull goes to the master (a slave only while the master is gone).
    """

    __slots__ = ("follow", "table")

    def __init__(self, follow: bool = True) -> None:
        self.follow = follow
        self.table: dict[MessageQueue, int] = {}

    def broker_id(self, mq: MessageQueue) -> int:
        table = self.table
        return table.get(mq, MASTER_ID) if table else MASTER_ID  # most consumers: never hashes mq

    def suggested(self, mq: MessageQueue, broker_id: int) -> None:
        if broker_id == MASTER_ID or not self.follow:
            if self.table:
                self.table.pop(mq, None)
        else:
            self.table[mq] = broker_id


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    #: the answering broker's address and whether it is a slave
    addr: str = ""
    from_slave: bool = False
    #: the answer's records when pulled with ``decode=False`` (``decode_pulled`` makes ``messages``)
    body: bytes | memoryview | None = None


async def pull(
    instance: ClientInstance,
    mq: MessageQueue,
    group: str,
    offset: int,
    sub: Subscription,
    *,
    max_nums: int = 32,
    max_bytes: int | None = None,
    commit_offset: int = -1,
    suspend_ms: int = 0,
    timeout: float = 30.0,
    nodes: PullNodes | None = None,
    decode: bool = True,
) -> PullResult:
    """Pull from ``mq`` at ``offset``; messages not matching ``sub``'s tags are dropped here.

    ``nodes`` (a consumer's) picks the broker of the group and takes the answer's suggestion;
    without it the master is asked, or a slave while the route has no master.
    With ``decode`` off a found answer's records are left in ``body`` (the caller decodes them later).
    """
    broker_id = MASTER_ID if nodes is None else nodes.broker_id(mq)
    target = instance.routes.pull_addr(mq.brokerName, broker_id)
    if target is None:
        await instance.update_route(mq.topic)
        target = instance.routes.pull_addr(mq.brokerName, broker_id)
        if target is None:
            raise NoRouteError(f"no address for broker {mq.brokerName}")
    addr, slave = target
    if slave:
        commit_offset = -1  # a slave never commits: the offset stays in the client's store
    cmd = broker_api.pull_message(
        group,
        mq,
        offset,
        max_nums=max_nums,
        max_bytes=max_bytes,
        subscription=sub,
        commit_offset=commit_offset,
        suspend_ms=suspend_ms,
    )
    try:
        resp = await instance.rpc.invoke(addr, cmd, timeout)
    except TransportError:
        # The broker may be gone (a dead master): learn the route now, not at the next refresh,
        # so the retry goes to a slave (or the master's new address).
        try:
            await instance.update_route(mq.topic)
        except PymqError:
            pass
        raise
    status = _STATUS.get(resp.code)
    if status is None:
        raise error_for_response(resp.code, resp.remark, addr)
    if nodes is not None:
        nodes.suggested(mq, broker_api.read_pull_suggestion(resp))
    result = PullResult(status, *broker_api.read_pull_offsets(resp, offset), addr=addr, from_slave=slave)
    if status is PullStatus.FOUND:
        # A received body is one buffer (bytes or a view of the read buffer), never a list of them.
        body = cast(bytes | memoryview, resp.body)
        if decode:
            result.messages = decode_pulled(body, mq, sub)
        else:
            result.body = body
    return result


def decode_pulled(body: bytes | memoryview, mq: MessageQueue, sub: Subscription) -> list[MessageExt]:
    msgs: list[MessageExt] = []
    tags = sub.tags
    retry = mq.topic.startswith(RETRY_PREFIX)
    # Messages decode lazily: the tag check reads one property, not the whole map.
    for m in iter_messages(body, broker_name=mq.brokerName):
        if tags and m.tags not in tags:
            continue
        if retry:
            # Listeners see the topic the message was first sent to.
            original = m.get_property(Prop.RETRY_TOPIC)
            if original:
                m.topic = original
        msgs.append(m)
    return msgs
