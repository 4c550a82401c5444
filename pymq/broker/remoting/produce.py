"""Translators of what a 4.x producer sends: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320),
END_TRANSACTION (37), CONSUMER_SEND_MSG_BACK (36), QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33); and the
CHECK_TRANSACTION_STATE (39) push."""

from __future__ import annotations

from pymq.broker.remoting.context import RemotingContext
from pymq.broker.remoting.gateway import PushMapper, Translator


def produce_translators(ctx: RemotingContext) -> dict[int, Translator]:
    return {}


def produce_pushes(ctx: RemotingContext) -> dict[int, PushMapper]:
    return {}
