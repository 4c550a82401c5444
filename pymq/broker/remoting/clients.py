"""Translators of client membership: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38).

RocketMQ's HeartbeatData is the shape pymq's heartbeat body already has (clientID,
producerDataSet, consumerDataSet with subscriptionDataSet); only the encoding differs
(fastjson JSON, not msgpack) and the client's language and version come from the frame
header, not the body. Unregister's header names agree; the consumer list's body is JSON.
"""

from __future__ import annotations

import json
from typing import Any

from pymq.broker.remoting.context import RemotingContext
from pymq.broker.remoting.gateway import RemotingChannel, Translated, Translator, passthrough
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.remoting.consume_map import RemotingRequestError, consumer_data_names


def json_body(cmd: Command, what: str) -> Any:
    """The request's JSON body; a malformed one is the client's error (SYSTEM_ERROR, as RocketMQ answers it)."""
    try:
        return json.loads(cmd.body_bytes())
    except (UnicodeDecodeError, ValueError) as exc:
        raise _BadBody(f"{what} body is not JSON: {exc}") from None


class _BadBody(ValueError):
    pass


def _heartbeat(cmd: Command, channel: RemotingChannel) -> Translated | Command:
    try:
        body = json_body(cmd, "heartbeat")
    except _BadBody as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
    if not isinstance(body, dict):
        return cmd.response(ResponseCode.SYSTEM_ERROR, "heartbeat body is not a JSON object")
    try:
        for consumer in body.get("consumerDataSet") or []:
            if isinstance(consumer, dict):
                consumer_data_names(consumer)  # the C++ client's enum ordinals -> names
    except RemotingRequestError as exc:
        return cmd.response(exc.code, exc.remark)
    wire = channel.attrs.get("wire")
    if wire is not None:
        body["language"] = wire.language.name
        body["version"] = wire.version
    native = Command(int(RequestCode.HEART_BEAT), body=encode_body(body))
    return Translated(native, passthrough)


def _unregister(cmd: Command, channel: RemotingChannel) -> Translated:
    return Translated(Command(int(RequestCode.UNREGISTER_CLIENT), ext=dict(cmd.ext)), passthrough)


def _consumer_list_answer(resp: Command) -> Command:
    if resp.code != ResponseCode.SUCCESS:
        return resp
    ids = decode_body(resp.body, "consumer list").get("consumerIdList", [])
    return Command(resp.code, resp.opaque, resp.flags, resp.remark, body=json.dumps({"consumerIdList": ids}).encode())


def _consumer_list(cmd: Command, channel: RemotingChannel) -> Translated:
    native = Command(int(RequestCode.GET_CONSUMER_LIST_BY_GROUP), ext=dict(cmd.ext))
    return Translated(native, _consumer_list_answer)


def client_translators(ctx: RemotingContext) -> dict[int, Translator]:
    return {
        RequestCode.HEART_BEAT: _heartbeat,
        RequestCode.UNREGISTER_CLIENT: _unregister,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: _consumer_list,
    }
