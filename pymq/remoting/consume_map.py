"""What a 4.x consumer sends, mapped onto pymq's native requests and back (pure, no I/O).

RocketMQ 4.9's consumer headers carry pymq's field names already (``PullMessageRequestHeader``,
``QueryConsumerOffsetRequestHeader``, ``GetMaxOffsetRequestHeader`` … were the model of
:mod:`pymq.protocol.requests`), so a header maps by validating it with the native typed header
and re-emitting it; what differs is:

* PULL_MESSAGE: the subscription rides in the request only with the subscription bit of
  ``sysFlag`` (0x4); without it the broker uses the expression the group's heartbeat registered
  (:func:`pull_request` says which). Only TAG expressions exist (``expressionType`` SQL92 is
  refused, as a 4.9 broker without ``enablePropertyFilter`` refuses it), and the class-filter bit
  (0x8) is refused. ``maxMsgNums`` is clamped to pymq's 1..1024 (RocketMQ takes any number and
  reads what fits). The body goes back in MessageDecoder's layout
  (:func:`~pymq.remoting.message_layout.from_stored_records`).
* Tag filtering: a 4.x client computes tag hash codes with Java's ``String.hashCode`` and sends
  them in its heartbeat's ``codeSet``; pymq's consume queues hold ``crc32`` of the tag. The broker
  never uses the client's codes: it parses the expression string (the pull's, or the heartbeat's
  ``subString``) into its own codes, and the client re-checks the tag string (``tagsSet``) as it
  always does, so both agree on what matches.
* LOCK_BATCH_MQ / UNLOCK_BATCH_MQ bodies are fastjson JSON (pymq's are msgpack).
* Bad input (a missing or ill-typed header field, a body that is not the JSON it should be) is a
  :class:`RemotingRequestError`: answered SYSTEM_ERROR with a remark naming the field, as a 4.9
  broker answers a RemotingCommandException.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pymq.errors import InvalidRequestError
from pymq.protocol.requests import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUSPEND,
    LOCK_OK_MQ_SET,
    MAX_PULL_MSG_NUMS,
    LockBatchBody,
    QueryConsumerOffsetRequest,
    QueueOffsetRequest,
    SearchOffsetRequest,
    UpdateConsumerOffsetRequest,
)
from pymq.protocol.route import MessageQueue
from pymq.remoting.codes import ResponseCode
from pymq.remoting.message_layout import from_stored_records

__all__ = [
    "FLAG_CLASS_FILTER",
    "FLAG_SUBSCRIPTION",
    "PullRequest",
    "RemotingRequestError",
    "consumer_data_names",
    "lock_request_body",
    "lock_response_body",
    "native_code",
    "offset_request",
    "pull_body",
    "pull_request",
    "pull_response_ext",
]

#: PullSysFlag bits beyond commit-offset (0x1) and suspend (0x2)
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8

#: pymq response codes a 4.9 client does not know -> the RocketMQ code that means the same
_NATIVE_ONLY_CODES = {
    213: int(ResponseCode.SYSTEM_ERROR),  # pymq's INVALID_PARAMETER: a bad header field (RocketMQ: SYSTEM_ERROR)
}


class RemotingRequestError(ValueError):
    """A 4.x request pymq cannot take as it is; ``code`` and ``remark`` make the response."""

    def __init__(self, remark: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(remark)
        self.code = int(code)
        self.remark = remark


def native_code(code: int) -> int:
    """The RocketMQ response code for a native answer's code (most are RocketMQ's numbers already)."""
    return _NATIVE_ONLY_CODES.get(code, code)


# --- PULL_MESSAGE ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class PullRequest:
    """A 4.x PULL_MESSAGE as pymq reads it."""

    #: the native PULL's ext, without ``subscription`` when the broker must supply it
    ext: dict[str, Any]
    consumer_group: str
    topic: str
    #: True: the request carries no subscription (its sysFlag lacks 0x4); use the group's registered one
    needs_subscription: bool


def _checked(what: str, ext: Mapping[str, Any], header: Any) -> Any:
    try:
        return header.from_ext(ext)
    except InvalidRequestError as exc:
        raise RemotingRequestError(f"{what}: {exc.remark}") from None


#: PullMessageRequestHeader's fields, as pymq's PULL names them too (extFields beyond these, such as
#: the AccessKey/Signature every C++ request carries, are not handed on)
_PULL_FIELDS = (
    "consumerGroup",
    "topic",
    "queueId",
    "queueOffset",
    "maxMsgNums",
    "sysFlag",
    "commitOffset",
    "suspendTimeoutMillis",
    "subscription",
    "subVersion",
)


#: the pull's numeric fields, parsed here once (the native header then takes ints at its fast path)
_PULL_INTS = ("queueId", "queueOffset", "commitOffset", "suspendTimeoutMillis", "subVersion")


def _int_field(ext: Mapping[str, Any], name: str, default: int) -> int:
    """A decimal integer as Java's ``Long.parseLong`` reads it (ASCII digits, an optional sign)."""
    raw = ext.get(name)
    if raw is None:
        return default
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    digits = raw[1:] if isinstance(raw, str) and raw[:1] in ("-", "+") else raw
    if not (isinstance(digits, str) and digits.isascii() and digits.isdigit()):
        raise RemotingRequestError(f"PULL_MESSAGE: header field '{name}' must be an integer, got {raw!r}")
    return int(raw)


def pull_request(ext: Mapping[str, Any]) -> PullRequest:
    """PullMessageRequestHeader -> the native PULL's ext.

    Only what differs is checked here (sysFlag's bits, maxMsgNums' range, the subscription,
    expressionType); the native handler checks the rest and names a missing or ill-typed field
    (its INVALID_PARAMETER answer goes back as SYSTEM_ERROR, see :func:`native_code`). One dict
    copy, no header object: this runs for every pull. Raises RemotingRequestError naming a bad field.
    """
    fields = {name: ext[name] for name in _PULL_FIELDS if name in ext}
    for name in ("consumerGroup", "topic"):
        if fields.get(name) is None:
            raise RemotingRequestError(f"PULL_MESSAGE: header field '{name}' is missing")
    sys_flag = _int_field(fields, "sysFlag", 0)
    for name in _PULL_INTS:
        if name in fields:
            raw = fields[name]
            # the usual value (ASCII digits) inline; anything else is judged, and named, by _int_field
            fields[name] = (
                int(raw) if raw.__class__ is str and raw.isdigit() and raw.isascii() else _int_field(fields, name, 0)
            )
    if "maxMsgNums" in fields:
        fields["maxMsgNums"] = min(max(_int_field(fields, "maxMsgNums", 32), 1), MAX_PULL_MSG_NUMS)
    etype = ext.get("expressionType")
    if etype is not None and str(etype).upper() != "TAG":
        raise RemotingRequestError(f"The broker does not support consumer to filter message by {etype}")
    if sys_flag & FLAG_CLASS_FILTER:
        raise RemotingRequestError("PULL_MESSAGE: class filter mode (sysFlag 0x8) is not supported")
    has_sub = bool(sys_flag & FLAG_SUBSCRIPTION)
    if has_sub:
        if fields.get("subscription") is None:
            raise RemotingRequestError("PULL_MESSAGE: header field 'subscription' is missing (sysFlag has 0x4)")
    else:
        fields.pop("subscription", None)
    fields["sysFlag"] = sys_flag & (FLAG_COMMIT_OFFSET | FLAG_SUSPEND)
    return PullRequest(fields, str(fields["consumerGroup"]), str(fields["topic"]), not has_sub)


def pull_response_ext(ext: Mapping[str, Any] | None) -> dict[str, Any]:
    """PullMessageResponseHeader from the native answer's ext (the four fields a 4.x client requires)."""
    ext = ext or {}
    return {
        "suggestWhichBrokerId": ext.get("suggestWhichBrokerId", 0),
        "nextBeginOffset": ext.get("nextBeginOffset", 0),
        "minOffset": ext.get("minOffset", 0),
        "maxOffset": ext.get("maxOffset", 0),
    }


def pull_body(
    body: bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview],
) -> bytes | list[bytes]:
    """A native pull body (stored records: one buffer, or a sequence of runs a tag filter split) in
    MessageDecoder's layout: one buffer per run, written one after the other without joining them."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        return from_stored_records(body)
    if len(body) == 1:
        return from_stored_records(body[0])
    return [from_stored_records(b) for b in body]


# --- offsets --------------------------------------------------------------------------------------------

_OFFSET_HEADERS: dict[str, Any] = {
    "QUERY_CONSUMER_OFFSET": QueryConsumerOffsetRequest,
    "UPDATE_CONSUMER_OFFSET": UpdateConsumerOffsetRequest,
    "GET_MAX_OFFSET": QueueOffsetRequest,
    "GET_MIN_OFFSET": QueueOffsetRequest,
    "GET_EARLIEST_MSG_STORETIME": QueueOffsetRequest,
    "SEARCH_OFFSET_BY_TIMESTAMP": SearchOffsetRequest,
}


def offset_request(what: str, ext: Mapping[str, Any]) -> dict[str, Any]:
    """An offset request's header (``what`` is the request code's name) as the native ext; checked."""
    return dict(_checked(what, ext, _OFFSET_HEADERS[what]).to_ext())


# --- LOCK_BATCH_MQ / UNLOCK_BATCH_MQ --------------------------------------------------------------------


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemotingRequestError(f"{what} body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RemotingRequestError(f"{what} body is not a JSON object")
    return obj


def lock_request_body(body: bytes, what: str = "LOCK_BATCH_MQ") -> dict[str, Any]:
    """LockBatchRequestBody / UnlockBatchRequestBody JSON -> the native lock body (a map to msgpack)."""
    obj = _json_object(body, what)
    for name in ("consumerGroup", "clientId", "mqSet"):
        if obj.get(name) is None:
            raise RemotingRequestError(f"{what} body field '{name}' is missing")
    if not isinstance(obj["mqSet"], list):
        raise RemotingRequestError(f"{what} body field 'mqSet' must be a list")
    for i, mq in enumerate(obj["mqSet"]):
        if not isinstance(mq, dict):
            raise RemotingRequestError(f"{what} body field 'mqSet[{i}]' must be an object")
        for name in ("topic", "brokerName", "queueId"):
            if mq.get(name) is None:
                raise RemotingRequestError(f"{what} body field 'mqSet[{i}].{name}' is missing")
    try:
        return LockBatchBody.from_body(obj).to_body()
    except InvalidRequestError as exc:
        raise RemotingRequestError(f"{what}: {exc.remark}") from None


def lock_response_body(native: Mapping[str, Any]) -> bytes:
    """The native lock answer's ``lockOKMQSet`` as LockBatchResponseBody JSON."""
    queues = [MessageQueue.from_dict(m) for m in native.get(LOCK_OK_MQ_SET) or []]
    return json.dumps(
        {"lockOKMQSet": [{"brokerName": q.brokerName, "queueId": q.queueId, "topic": q.topic} for q in queues]},
        separators=(",", ":"),
    ).encode()


# --- HEART_BEAT's consumer data -------------------------------------------------------------------------

#: ConsumerData enums by ordinal: the C++ client (1.x/2.x) writes them as numbers, Java's fastjson by name
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
_CONSUME_FROM = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
_CONSUMER_ENUMS = {"consumeType": _CONSUME_TYPES, "messageModel": _MESSAGE_MODELS, "consumeFromWhere": _CONSUME_FROM}


def consumer_data_names(data: dict[str, Any]) -> dict[str, Any]:
    """A heartbeat's ConsumerData with ``consumeType``/``messageModel``/``consumeFromWhere`` as names.

    The C++ client sends the enums' ordinals (``"messageModel": 1``); pymq, like Java's broker,
    keys on the names (``CLUSTERING``). Names pass unchanged; an ordinal out of range is an error
    naming the field.
    """
    for name, values in _CONSUMER_ENUMS.items():
        value = data.get(name)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, int):
            if not 0 <= value < len(values):
                raise RemotingRequestError(f"heartbeat consumerDataSet field '{name}' has no value {value}")
            data[name] = values[value]
    return data
