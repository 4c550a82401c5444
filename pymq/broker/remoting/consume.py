"""Translators of what a 4.x consumer sends: PULL_MESSAGE (11), HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), the offset codes (14, 15, 29, 30, 31, 32), LOCK_BATCH_MQ (41) /
UNLOCK_BATCH_MQ (42); and the NOTIFY_CONSUMER_IDS_CHANGED (40) push."""

from __future__ import annotations

from pymq.broker.remoting.context import RemotingContext
from pymq.broker.remoting.gateway import PushMapper, Translator


def consume_translators(ctx: RemotingContext) -> dict[int, Translator]:
    return {}


def consume_pushes(ctx: RemotingContext) -> dict[int, PushMapper]:
    return {}
