"""Returning a failed message to the broker for a later retry (CONSUMER_SEND_MSG_BACK).

If the broker cannot take it back that way, the message is published to the group's
retry topic directly, carrying what the broker would have set (as RocketMQ's client does).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pymq.client import broker_api
from pymq.errors import PymqError
from pymq.logs import get_logger
from pymq.protocol.message import MessageExt, Prop
from pymq.protocol.record import encode_properties, encode_record, pack_host
from pymq.protocol.requests import RETRY_PREFIX

if TYPE_CHECKING:
    from pymq.client.instance import ClientInstance

log = get_logger("client.sendback")


async def send_back(
    instance: ClientInstance,
    group: str,
    msg: MessageExt,
    *,
    delay_level: int = 0,
    max_reconsume_times: int | None = None,
) -> bool:
    """True once the message is safely back on the broker (retry or dead-letter queue).

    ``delay_level < 0`` sends it straight to the dead-letter queue; ``max_reconsume_times``
    None lets the broker's group setting decide.
    """
    max_times = -1 if max_reconsume_times is None else max_reconsume_times
    addr = instance.broker_addr(msg.broker_name)
    if addr is not None:
        cmd = broker_api.send_msg_back(
            group, msg.commitlog_offset, msg.msg_id, msg.topic, delay_level=delay_level, max_reconsume_times=max_times
        )
        try:
            await instance.rpc.invoke_ok(addr, cmd, instance.config.rpc_timeout_seconds)
            return True
        except PymqError as exc:
            log.warning("send_back_failed", group=group, msg_id=msg.msg_id, reason=str(exc))
    if delay_level < 0:
        return False  # dead-lettering needs the broker; the caller keeps the message
    return await _publish_to_retry_topic(instance, group, msg, max_times)


async def _publish_to_retry_topic(instance: ClientInstance, group: str, msg: MessageExt, max_times: int) -> bool:
    """Publish to ``%RETRY%<group>`` directly; the broker dead-letters it past the limit (-1: the group's)."""
    topic = RETRY_PREFIX + group
    route = instance.routes.route(topic) or await _route(instance, topic)
    if route is None:
        return False
    props = dict(msg.properties)
    props.setdefault(Prop.RETRY_TOPIC, msg.topic)
    props[Prop.RECONSUME_TIME] = str(msg.reconsume_times + 1)
    if max_times >= 0:  # else the broker applies the group's retryMaxTimes
        props[Prop.MAX_RECONSUME_TIMES] = str(max_times)
    props[Prop.DELAY] = str(3 + msg.reconsume_times)
    record = encode_record(
        topic.encode(),
        msg.body,
        encode_properties(props),
        flag=msg.flag,
        born_timestamp=msg.born_timestamp or int(time.time() * 1000),
        born_host=pack_host(*_split(msg.born_host)),
        reconsume_times=msg.reconsume_times + 1,
    )
    for bd in route.brokerDatas:
        addr = bd.master_addr
        if addr is None:
            continue
        try:
            await instance.rpc.invoke_ok(
                addr, broker_api.send_message(topic, 0, None, record), instance.config.rpc_timeout_seconds
            )
            return True
        except PymqError as exc:
            log.warning("retry_publish_failed", group=group, broker=addr, reason=str(exc))
    return False


async def _route(instance: ClientInstance, topic: str):  # type: ignore[no-untyped-def]
    try:
        return await instance.update_route(topic)
    except PymqError:
        return None


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "0.0.0.0", int(port or 0)
