"""The checks a read passes before it reads (pulls and pops alike), with RocketMQ's answers.

The topic exists here and is readable, the queue is one of its read queues (a negative id,
"any queue", is the caller's to allow), the group exists and may consume. The answer is
either the refusal to send or the topic's and group's configs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.route import TopicConfig, perm_readable

if TYPE_CHECKING:
    from pymq.broker.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager


def check_read(
    cmd: Command,
    topics: TopicConfigManager,
    subscription_groups: SubscriptionGroupManager,
    address: str,
    topic: str,
    queue_id: int,
    group: str,
) -> Command | tuple[TopicConfig, SubscriptionGroupConfig]:
    """The refusal of a read of ``topic``/``queue_id`` by ``group`` (a response), else (topic, group) configs."""
    tc = topics.get(topic)
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {address}")
    if not perm_readable(tc.perm):
        return cmd.response(ResponseCode.NO_PERMISSION, f"topic[{topic}] is not readable on {address}")
    if queue_id >= tc.readQueueNums:
        return cmd.response(
            ResponseCode.INVALID_PARAMETER,
            f"header field 'queueId' out of range: {queue_id}, topic {topic} has read queues 0..{tc.readQueueNums - 1}",
        )
    sg = subscription_groups.get(group)
    if sg is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group {group} does not exist")
    if not sg.consumeEnable:
        return cmd.response(ResponseCode.NO_PERMISSION, f"consumer group {group} is not allowed to consume")
    return tc, sg


__all__ = ["check_read"]
