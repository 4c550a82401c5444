"""CONSUMER_SEND_MSG_BACK: a consumer failed a message; schedule a retry or dead-letter it.

The message is reloaded by its commitlog offset and re-stored in ``%RETRY%<group>`` with
``reconsumeTimes + 1`` and delay level ``3 + reconsumeTimes`` (10 s, 30 s, 1 m … 2 h) unless
the consumer asked for a level, or in ``%DLQ%<group>`` once it has been retried
``maxReconsumeTimes`` times (the consumer's value, else the group's ``retryMaxTimes``) or
when the consumer asks for it with a negative level.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from pymq.broker.put_path import PUT_STATUS_TO_CODE, PutMessages
from pymq.broker.retry.policy import exhausted, keep_origin, retry_limit
from pymq.broker.store.results import PutStatus
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.message import Prop
from pymq.protocol.record import decode_properties, encode_properties, parse_record, reencode
from pymq.protocol.requests import ConsumerSendMsgBackRequest, dlq_topic, retry_topic
from pymq.protocol.route import PERM_READ_WRITE
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager

log = get_logger("broker.sendback")


class SendBackHandlers:
    def __init__(
        self,
        *,
        store: MessageStore,
        put_messages: PutMessages,
        topics: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        stats: BrokerStats,
    ) -> None:
        self.store = store
        self.put_messages = put_messages
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.stats = stats

    def table(self) -> dict[int, Handler]:
        return {RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back}

    def send_back(self, cmd: Command, channel: Channel) -> Command:
        header = ConsumerSendMsgBackRequest.from_ext(cmd.ext)
        group = header.group
        offset = header.offset
        delay_level = header.delay_level
        sg = self.subscription_groups.get(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group {group} does not exist")
        rec = self.store.read_record(offset)
        if rec is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no message at commitlog offset {offset}")
        r = parse_record(rec)
        props = decode_properties(r.properties)
        origin_id = header.origin_msg_id or props.get(Prop.UNIQ_KEY, "")
        keep_origin(props, props.get(Prop.RETRY_TOPIC) or r.topic.decode(), origin_id)
        props.pop(Prop.DELAY, None)
        if exhausted(r.reconsume_times, retry_limit(sg, header.max_reconsume_times)) or delay_level < 0:
            target = dlq_topic(group)
            self.topics.ensure_system_topic(target, 1, PERM_READ_WRITE)
            queue_id = 0
            log.info("message_dead_lettered", group=group, msg_id=origin_id, reconsume_times=r.reconsume_times)
        else:
            target = retry_topic(group)
            tc = self.topics.ensure_system_topic(target, sg.retryQueueNums, PERM_READ_WRITE)
            queue_id = random.randrange(tc.writeQueueNums)
            level = delay_level if delay_level > 0 else 3 + r.reconsume_times
            props[Prop.DELAY] = str(level)
        record = reencode(r, target.encode(), encode_properties(props), reconsume_times=r.reconsume_times + 1)
        results = self.put_messages(target, queue_id, record)
        self.stats.record_put(target, results)
        res = results[0]
        if res.status == PutStatus.PUT_OK:
            return cmd.response()
        return cmd.response(
            PUT_STATUS_TO_CODE.get(res.status, ResponseCode.SYSTEM_ERROR), res.reason or res.status.name
        )
