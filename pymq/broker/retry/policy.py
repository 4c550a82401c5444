"""The retry → dead-letter decision, in one place for the three paths that re-deliver a message.

* a consumer's send-back (CONSUMER_SEND_MSG_BACK, :mod:`pymq.broker.retry.sendback`),
* a retry the client published itself after its send-back failed (a SEND to ``%RETRY%<group>``,
  :func:`dead_letter_if_exhausted`, called by the send handler),
* pop revival of a message not acked in time (:mod:`pymq.broker.pop.revive`).

As RocketMQ: a message that has been consumed ``reconsumeTimes`` times so far goes to
``%DLQ%<group>`` once that reaches the limit: the consumer's own ``maxReconsumeTimes`` when it
sends one (>= 0), else the group's ``retryMaxTimes``, else :data:`DEFAULT_MAX_RECONSUME_TIMES`.
A redelivered record keeps where it came from: ``RETRY_TOPIC`` (its original topic) and
``ORIGIN_MESSAGE_ID`` (its first message id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.broker.subscription_groups import DEFAULT_MAX_RECONSUME_TIMES
from pymq.errors import MessageDecodeError
from pymq.protocol.command import Buffer
from pymq.protocol.message import Prop
from pymq.protocol.record import decode_properties, encode_properties, parse_record, reencode
from pymq.protocol.requests import RETRY_PREFIX, dlq_topic
from pymq.protocol.route import PERM_READ_WRITE

if TYPE_CHECKING:
    from pymq.broker.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager


def retry_limit(group: SubscriptionGroupConfig | None, requested: int = -1) -> int:
    """How many times a message of ``group`` is consumed before it is dead-lettered."""
    if requested >= 0:
        return requested
    return group.retryMaxTimes if group is not None else DEFAULT_MAX_RECONSUME_TIMES


def exhausted(reconsume_times: int, limit: int) -> bool:
    """Whether a message already consumed ``reconsume_times`` times has used up its retries."""
    return reconsume_times >= limit


def keep_origin(props: dict[str, str], original_topic: str, origin_id: str | None) -> None:
    """Record where a redelivered message came from (its topic and first message id), in place."""
    props[Prop.RETRY_TOPIC] = original_topic
    if origin_id:
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, origin_id)


def dead_letter_if_exhausted(
    topic: str,
    queue_id: int,
    body: Buffer,
    subscription_groups: SubscriptionGroupManager,
    topics: TopicConfigManager,
) -> tuple[str, int, Buffer]:
    """A retry a client published itself (its send-back failed) goes to ``%DLQ%`` past the limit.

    The record's reconsume count was already incremented by the client, so the count before
    this retry is one less; the limit is its MAX_RECONSUME_TIMES property, else the group's.
    Returns where to store it: unchanged, or the group's DLQ with the record re-encoded.
    """
    try:
        r = parse_record(body)
    except MessageDecodeError:
        return topic, queue_id, body  # the store refuses it with MESSAGE_ILLEGAL
    if r.total_size != len(body):
        return topic, queue_id, body  # a batch: clients publish retries one at a time
    props = decode_properties(r.properties)
    group = topic[len(RETRY_PREFIX) :]
    raw = props.get(Prop.MAX_RECONSUME_TIMES, "")
    requested = int(raw) if raw.lstrip("-").isdigit() else -1
    if not exhausted(r.reconsume_times - 1, retry_limit(subscription_groups.get(group), requested)):
        return topic, queue_id, body
    target = dlq_topic(group)
    topics.ensure_system_topic(target, 1, PERM_READ_WRITE)
    props.pop(Prop.DELAY, None)
    return target, 0, reencode(r, target.encode(), encode_properties(props))


__all__ = ["DEFAULT_MAX_RECONSUME_TIMES", "dead_letter_if_exhausted", "exhausted", "keep_origin", "retry_limit"]
