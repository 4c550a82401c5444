"""Translators of what a 4.x consumer sends: PULL_MESSAGE (11), the offset codes (14, 15, 29, 30, 31, 32),
LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42); and the NOTIFY_CONSUMER_IDS_CHANGED (40) push.
(HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP are in :mod:`.clients`.)

Each request becomes the native one (the pure mappings are :mod:`pymq.remoting.consume_map`), so
a 4.x pull takes pymq's one pull path: read checks, offset commit with the pull, long polling
(a held pull's answer comes back through the mapper when it resolves), stats.
"""

from __future__ import annotations

from pymq.broker.remoting.context import RemotingContext
from pymq.broker.remoting.gateway import PushMapper, RemotingChannel, ResponseMapper, Translated, Translator
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.remoting.codes import ResponseCode as RemotingResponseCode
from pymq.remoting.consume_map import (
    RemotingRequestError,
    lock_request_body,
    lock_response_body,
    native_code,
    offset_request,
    pull_body,
    pull_request,
    pull_response_ext,
)

#: native pull codes whose answers carry PullMessageResponseHeader
_PULL_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    }
)


def _guarded(translate: Translator) -> Translator:
    """Bad input answered with its code and a remark naming the field, never a traceback."""

    def guarded(cmd: Command, channel: RemotingChannel) -> Translated | Command:
        try:
            return translate(cmd, channel)
        except RemotingRequestError as exc:
            return cmd.response(exc.code, exc.remark)

    return guarded


def _plain_answer(resp: Command) -> Command:
    """A native answer whose ext names agree with RocketMQ's; only the code may need mapping."""
    code = native_code(resp.code)
    if code != resp.code:
        return Command(code, resp.opaque, resp.flags, resp.remark, resp.ext, resp.body)
    return resp


def _pull_answer(resp: Command) -> Command:
    if resp.code not in _PULL_CODES or resp.ext is None or "nextBeginOffset" not in resp.ext:
        return _plain_answer(resp)  # refused before reading (no topic, no permission …): no offsets
    body = pull_body(resp.body) if resp.code == ResponseCode.SUCCESS else b""
    return Command(resp.code, resp.opaque, resp.flags, resp.remark, pull_response_ext(resp.ext), body)


def _pull(ctx: RemotingContext) -> Translator:
    subscription_of = ctx.subscription

    def translate(cmd: Command, channel: RemotingChannel) -> Translated | Command:
        req = pull_request(cmd.ext)
        ext = req.ext
        if req.needs_subscription:
            expression = subscription_of(req.consumer_group, req.topic)
            if expression is None:
                return cmd.response(
                    RemotingResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist: group {req.consumer_group} topic {req.topic}",
                )
            ext["subscription"] = expression
        return Translated(Command(int(RequestCode.PULL_MESSAGE), ext=ext), _pull_answer)

    return translate


def _offsets(code: RequestCode) -> Translator:
    name = code.name

    def translate(cmd: Command, channel: RemotingChannel) -> Translated:
        return Translated(Command(int(code), ext=offset_request(name, cmd.ext)), _plain_answer)

    return translate


def _lock_answer(resp: Command) -> Command:
    if resp.code != ResponseCode.SUCCESS:
        return _plain_answer(resp)
    body = lock_response_body(decode_body(resp.body, "lock answer"))
    return Command(resp.code, resp.opaque, resp.flags, resp.remark, body=body)


def _locking(code: RequestCode, answer: ResponseMapper) -> Translator:
    name = code.name

    def translate(cmd: Command, channel: RemotingChannel) -> Translated:
        native = Command(int(code), body=encode_body(lock_request_body(cmd.body_bytes(), name)))
        return Translated(native, answer)

    return translate


def consume_translators(ctx: RemotingContext) -> dict[int, Translator]:
    table: dict[int, Translator] = {
        RequestCode.PULL_MESSAGE: _pull(ctx),
        RequestCode.LOCK_BATCH_MQ: _locking(RequestCode.LOCK_BATCH_MQ, _lock_answer),
        RequestCode.UNLOCK_BATCH_MQ: _locking(RequestCode.UNLOCK_BATCH_MQ, _plain_answer),
    }
    for code in (
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.GET_MAX_OFFSET,
        RequestCode.GET_MIN_OFFSET,
        RequestCode.GET_EARLIEST_MSG_STORETIME,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    ):
        table[code] = _offsets(code)
    return {code: _guarded(t) for code, t in table.items()}


def _notify_ids_changed(cmd: Command) -> Command:
    """NotifyConsumerIdsChangedRequestHeader: only ``consumerGroup``."""
    return Command.request(int(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED), {"consumerGroup": cmd.ext["consumerGroup"]})


def consume_pushes(ctx: RemotingContext) -> dict[int, PushMapper]:
    return {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _notify_ids_changed}
