"""Pure mapping between apache.rocketmq.v2 protobuf messages and pymq's messages (no I/O).

Receipt handles given to 5.x clients wrap the broker's own handle with the broker's name (a
pop answer comes from one broker; the ack must go back to it): ``<b64(broker)>~<handle>``.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from pymq.errors import (
    ClientError,
    InvalidReceiptHandleError,
    MessageIllegalError,
    NoPermissionError,
    NoRouteError,
    PymqError,
    RemoteError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
)
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.protocol.filter import Subscription
from pymq.protocol.message import Message, MessageExt, Prop
from pymq.protocol.route import MASTER_ID, PERM_READ, PERM_WRITE, TopicRouteData
from pymq.protocol.transaction import CHECK_IMMUNITY_TIME_IN_SECONDS, PGROUP, TRAN_MSG, TRANSACTION_CHECK_TIMES

#: user property names a 5.x client may not set (ILLEGAL_MESSAGE_PROPERTY_KEY, as RocketMQ's proxy refuses
#: MessageConst's system names): every property pymq's broker or clients read (REAL_TOPIC, TRAN_MSG, PGROUP,
#: RETRY_TOPIC, PRIORITY ... would re-route, half or re-prioritise a message) and, with the ``__`` prefix,
#: its and RocketMQ's internal ones; :func:`to_v2` hides all of them (user properties are the rest), so a
#: 5.x consumer reads back what a 5.x producer sent
_SYSTEM_NAMES = frozenset(
    {v for k, v in vars(Prop).items() if k.isupper() and isinstance(v, str)}
    | {TRAN_MSG, PGROUP, CHECK_IMMUNITY_TIME_IN_SECONDS, TRANSACTION_CHECK_TIMES}
)
_SEPARATORS = ("\x01", "\x02")  # the property string's separators (pymq's record and RocketMQ's)
#: the property that carries a FIFO message's group through pymq (RocketMQ 5 stores it there too)
MESSAGE_GROUP_PROP = "__SHARDINGKEY"
_ALL_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
_HANDLE_SEP = "~"
_OFFSET_SEP = "."


class MappingError(Exception):
    """A client request that cannot be mapped: carries the v2 status code and a message naming the field."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int = pb.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


def error_status(exc: BaseException) -> pb.Status:
    """The v2 status for an exception raised while serving a request."""
    if isinstance(exc, MappingError):
        return status(exc.code, exc.message)
    if isinstance(exc, InvalidReceiptHandleError):
        return status(pb.INVALID_RECEIPT_HANDLE, str(exc))
    if isinstance(exc, TopicNotExistError | NoRouteError):
        return status(pb.TOPIC_NOT_FOUND, str(exc))
    if isinstance(exc, SubscriptionGroupNotExistError):
        return status(pb.CONSUMER_GROUP_NOT_FOUND, str(exc))
    if isinstance(exc, NoPermissionError):
        return status(pb.FORBIDDEN, str(exc))
    if isinstance(exc, MessageIllegalError | ClientError):
        return status(pb.BAD_REQUEST, str(exc))
    if isinstance(exc, RemoteError) and exc.code == pb.INVALID_RECEIPT_HANDLE:
        return status(pb.INVALID_RECEIPT_HANDLE, str(exc))
    if isinstance(exc, PymqError):
        return status(pb.INTERNAL_SERVER_ERROR, str(exc))
    if isinstance(exc, TimeoutError):
        return status(pb.PROXY_TIMEOUT, "broker did not answer in time")
    return status(pb.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


def millis(d: Duration) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# --- routes ---------------------------------------------------------------------------------------------------


def _permission(perm: int) -> int:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return pb.READ_WRITE
    return pb.READ if readable else pb.WRITE if writable else pb.NONE


def message_types(attributes: dict[str, str], *, unset_is_normal: bool = False) -> list[int]:
    """The types a topic accepts: its ``message.type`` attribute (RocketMQ 5), all when MIXED.

    Unset (or not a type's name): all, unless ``unset_is_normal``, which is RocketMQ's rule
    (TopicConfig.getTopicMessageType says NORMAL for a topic without the attribute)."""
    declared = attributes.get("message.type", "").strip().upper()
    by_name = {"NORMAL": pb.NORMAL, "FIFO": pb.FIFO, "DELAY": pb.DELAY, "TRANSACTION": pb.TRANSACTION}
    if declared in by_name:
        return [by_name[declared]]
    if unset_is_normal and not declared:
        return [pb.NORMAL]
    return list(_ALL_TYPES)


def route_queues(
    topic: pb.Resource, route: TopicRouteData, endpoints: pb.Endpoints, types: list[int]
) -> list[pb.MessageQueue]:
    """The 5.x view of a pymq route: every queue of every broker with a master, all served by ``endpoints``.

    The clients connect to the broker's endpoints; these are the front end's own (a proxy).
    """
    out: list[pb.MessageQueue] = []
    for qd in sorted(route.queueDatas, key=lambda q: q.brokerName):
        bd = route.broker(qd.brokerName)
        if bd is None or MASTER_ID not in bd.brokerAddrs:
            continue
        broker = pb.Broker(name=qd.brokerName, id=MASTER_ID, endpoints=endpoints)
        for qid in range(max(qd.readQueueNums, qd.writeQueueNums)):
            perm = qd.perm
            if qid >= qd.readQueueNums:
                perm &= ~PERM_READ
            if qid >= qd.writeQueueNums:
                perm &= ~PERM_WRITE
            out.append(
                pb.MessageQueue(
                    topic=topic,
                    id=qid,
                    permission=_permission(perm),  # type: ignore[arg-type]
                    broker=broker,
                    accept_message_types=types,  # type: ignore[arg-type]
                )
            )
    return out


# --- send -----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Outgoing:
    """A 5.x message ready for pymq's producer: the message, its client-assigned id, its FIFO group."""

    message: Message
    message_id: str
    message_group: str | None
    message_type: int


def to_pymq(msg: pb.Message, max_body: int) -> Outgoing:
    """A 5.x message as pymq's :class:`Message` (the body passes as bytes); MappingError names what is wrong."""
    topic = msg.topic.name
    if not topic:
        raise MappingError(pb.ILLEGAL_TOPIC, "message.topic.name is empty")
    body = msg.body
    if not body:
        raise MappingError(pb.MESSAGE_BODY_EMPTY, "message.body is empty")
    if len(body) > max_body:
        raise MappingError(pb.MESSAGE_BODY_TOO_LARGE, f"message.body is {len(body)} bytes, at most {max_body}")
    sp = msg.system_properties
    props: dict[str, str] = {}
    for key, value in msg.user_properties.items():
        if not key or key in _SYSTEM_NAMES or key.startswith("__") or _separated(key):
            raise MappingError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {key!r} is reserved or empty")
        if _separated(value):
            raise MappingError(pb.BAD_REQUEST, f"user property {key!r} has \\x01 or \\x02 in its value")
        props[key] = value
    tag = sp.tag if sp.HasField("tag") else None
    if tag is not None and (not tag.strip() or "|" in tag or _separated(tag)):
        raise MappingError(pb.ILLEGAL_MESSAGE_TAG, f"system_properties.tag {tag!r} is blank or has '|', \\x01, \\x02")
    keys = [k for k in sp.keys]
    if any(not k.strip() or _separated(k) for k in keys):
        raise MappingError(pb.ILLEGAL_MESSAGE_KEY, "system_properties.keys has a blank key or one with \\x01, \\x02")
    group = sp.message_group if sp.HasField("message_group") else None
    if group is not None and _separated(group):
        raise MappingError(pb.ILLEGAL_MESSAGE_GROUP, "system_properties.message_group has \\x01 or \\x02")
    mtype = sp.message_type
    if mtype != pb.MESSAGE_TYPE_UNSPECIFIED and mtype not in _ALL_TYPES:
        raise MappingError(pb.BAD_REQUEST, f"system_properties.message_type {mtype} is not a message type")
    if group is not None:
        if not group:
            raise MappingError(pb.ILLEGAL_MESSAGE_GROUP, "system_properties.message_group is empty")
        props[MESSAGE_GROUP_PROP] = group
    out = Message(topic=topic, body=body, tags=tag, keys=keys or None, properties=props)
    if sp.HasField("delivery_timestamp"):
        if group is not None:
            raise MappingError(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a message has either a message_group or a delivery_timestamp"
            )
        out.set_delivery_time(millis_ts(sp.delivery_timestamp))
    return Outgoing(out, sp.message_id, group, mtype)


def _separated(text: str) -> bool:
    return _SEPARATORS[0] in text or _SEPARATORS[1] in text


def mark_transactional(out: Outgoing, sp: pb.SystemProperties, group: str) -> None:
    """A TRANSACTION message becomes a pymq half message of ``group`` (its check-backs come to that group)."""
    if out.message_group is not None or Prop.TIMER_DELIVER_MS in out.message.properties:
        raise MappingError(
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a TRANSACTION message has no message_group or delivery_timestamp"
        )
    props = out.message.properties
    props[TRAN_MSG] = "true"
    props[PGROUP] = group
    if sp.HasField("orphaned_transaction_recovery_duration"):
        seconds = max(1, millis(sp.orphaned_transaction_recovery_duration) // 1000)
        props[CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)


def transaction_id(broker: str, queue_offset: int, commit_log_offset: int, msg_id: str) -> str:
    """What EndTransaction needs to find the half message, as the transaction id (stateless front end)."""
    return wrap_handle(broker, f"{queue_offset} {commit_log_offset} {msg_id}")


def parse_transaction_id(tx_id: str) -> tuple[str, int, int, str]:
    """(broker, queue offset, commit log offset, message id) of :func:`transaction_id`; MappingError if not one."""
    try:
        broker, rest = unwrap_handle(tx_id)
        q, c, msg_id = rest.split(" ", 2)
        return broker, int(q), int(c), msg_id
    except (MappingError, ValueError):
        raise MappingError(pb.INVALID_TRANSACTION_ID, "transaction_id was not issued by this service") from None


def millis_ts(ts: Timestamp) -> int:
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def effective_type(out: Outgoing) -> int:
    """The message's type: as the client declared it, else from its properties (RocketMQ's
    TopicMessageType.parseFromMessageProperty: a delivery time is DELAY, a message group FIFO)."""
    if out.message_type:
        return out.message_type
    if Prop.TIMER_DELIVER_MS in out.message.properties:
        return pb.DELAY
    return pb.FIFO if out.message_group is not None else pb.NORMAL


def check_type(out: Outgoing, accepted: list[int]) -> None:
    """RocketMQ 5's rule: the message's type must be one the topic accepts."""
    mtype = effective_type(out)
    if mtype not in accepted:
        names = ", ".join(_type_name(t) for t in accepted)
        raise MappingError(
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {out.message.topic} accepts {names} messages (its message.type attribute), not {_type_name(mtype)}",
        )


def _type_name(mtype: int) -> str:
    """The type's name; a number protobuf kept without a name (an open enum) as the number."""
    try:
        return str(pb.MessageType.Name(mtype))
    except ValueError:
        return str(mtype)


# --- receive --------------------------------------------------------------------------------------------------


def wrap_handle(broker_name: str, handle: str, commitlog_offset: int | None = None) -> str:
    """``<b64(broker)>[.<commitlog offset>]~<handle>``: the offset (of the popped message) is what
    ForwardMessageToDeadLetterQueue sends back, as RocketMQ's handles carry it."""
    head = base64.urlsafe_b64encode(broker_name.encode()).decode()
    if commitlog_offset is not None:
        head += f"{_OFFSET_SEP}{commitlog_offset}"
    return head + _HANDLE_SEP + handle


def unwrap_handle(wrapped: str) -> tuple[str, str]:
    """(broker name, broker handle) of a handle made by :func:`wrap_handle`; MappingError if it is not one."""
    broker, handle, _ = unwrap_handle_offset(wrapped)
    return broker, handle


def unwrap_handle_offset(wrapped: str) -> tuple[str, str, int | None]:
    """(broker name, broker handle, commitlog offset or None) of a handle made by :func:`wrap_handle`."""
    head, sep, handle = wrapped.partition(_HANDLE_SEP)
    if not sep or not handle:
        raise MappingError(pb.INVALID_RECEIPT_HANDLE, "receipt_handle was not issued by this service")
    head, dot, offset_text = head.partition(_OFFSET_SEP)
    offset: int | None = None
    try:
        broker = base64.urlsafe_b64decode(head.encode()).decode()
        if dot:
            offset = int(offset_text)
            if offset < 0:
                raise ValueError(offset_text)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise MappingError(pb.INVALID_RECEIPT_HANDLE, "receipt_handle was not issued by this service") from None
    if not broker:
        raise MappingError(pb.INVALID_RECEIPT_HANDLE, "receipt_handle names no broker")
    return broker, handle, offset


def to_v2(m: MessageExt, topic: str, handle: str | None, invisible_ms: int, namespace: str = "") -> pb.Message:
    """A stored pymq message as the 5.x clients read it (ids, tag, keys, group, attempts, digest)."""
    props = m.properties
    user = {k: v for k, v in props.items() if k not in _SYSTEM_NAMES and not k.startswith("__")}
    body = m.body
    sp = pb.SystemProperties(
        message_id=props.get(Prop.UNIQ_KEY) or m.msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"),
        body_encoding=pb.IDENTITY,
        born_timestamp=timestamp(m.born_timestamp),
        born_host=m.born_host,
        store_timestamp=timestamp(m.store_timestamp),
        store_host=m.store_host,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        delivery_attempt=m.reconsume_times + 1,
    )
    tag = props.get(Prop.TAGS)
    if tag:
        sp.tag = tag
    keys = props.get(Prop.KEYS)
    if keys:
        sp.keys.extend(keys.split())
    group = props.get(MESSAGE_GROUP_PROP)
    if group:
        sp.message_group = group
        sp.message_type = pb.FIFO
    elif props.get(TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    elif Prop.TIMER_DELIVER_MS in props:
        sp.message_type = pb.DELAY
        sp.delivery_timestamp.CopyFrom(timestamp(int(props[Prop.TIMER_DELIVER_MS])))
    else:
        sp.message_type = pb.NORMAL
    if handle is not None:
        sp.receipt_handle = handle
        sp.invisible_duration.CopyFrom(duration(invisible_ms))
    return pb.Message(
        topic=pb.Resource(name=topic, resource_namespace=namespace),
        user_properties=user,
        system_properties=sp,
        body=body,
    )


# --- clients registered with the brokers ---------------------------------------------------------------------


#: the protocol the brokers list a 5.x client under (its heartbeat body's ``protocol``)
GRPC_PROTOCOL = "grpc"
_CONSUME_TYPES: dict[int, str] = {pb.PUSH_CONSUMER: "CONSUME_PASSIVELY", pb.SIMPLE_CONSUMER: "CONSUME_ACTIVELY"}


def client_language(metadata_language: str, agent: pb.UA | None) -> str:
    """The client's language in RocketMQ's words (JAVA, PYTHON, GOLANG...): its ``x-mq-language`` header,
    else its Settings.user_agent, else OTHER."""
    if metadata_language:
        return metadata_language.upper()
    if agent is not None and agent.language != pb.LANGUAGE_UNSPECIFIED:
        try:
            return str(pb.Language.Name(agent.language))
        except ValueError:  # a value this .proto has no name for (protobuf keeps unknown enum values)
            pass
    return "OTHER"


#: RocketMQ's MQVersion.Version ordinal of V5_0_0; each 5.a.b (a, b in 0..9) follows its _SNAPSHOT entry
_V5_0_0 = 413


def client_version_code(version: str) -> int:
    """A 5.x client's version (``x-mq-client-version`` / user agent, e.g. "5.1.2") as RocketMQ's version
    code (the ``MQVersion.Version`` ordinal 4.x clients send in their frames: V5_1_2 = 437); 0 if unknown."""
    parts = version.strip().lstrip("vV").split(".")
    if len(parts) < 3 or parts[0] != "5" or not all(len(p) == 1 and p.isdigit() for p in parts[1:3]):
        return 0
    return _V5_0_0 + 2 * (10 * int(parts[1]) + int(parts[2]))


def subscriptions(settings: pb.Settings) -> list[Subscription]:
    """A consumer's TAG subscriptions from its Telemetry settings (SQL ones are not served, so not listed)."""
    out = []
    for entry in settings.subscription.subscriptions:
        if entry.expression.type == pb.SQL or not entry.topic.name:
            continue
        out.append(Subscription.parse(entry.topic.name, entry.expression.expression or "*"))
    return out


def heartbeat_body(
    client_id: str,
    client_type: int,
    *,
    language: str,
    version: int = 0,
    producer_topics: list[str] | None = None,
    group: str = "",
    subs: list[Subscription] | None = None,
) -> dict[str, object]:
    """pymq's HEART_BEAT body for a 5.x client, sent by the front end on its behalf.

    A producer is listed under each topic it publishes (a 5.x producer has no group: RocketMQ's proxy
    registers it under the topic too); a consumer under its group, pop-style (CLUSTERING, its broker
    decides). ``protocol`` says "grpc" (the channel is the front end's, which is pymq's protocol)."""
    body: dict[str, object] = {
        "clientID": client_id,
        "language": language,
        "version": version,
        "protocol": GRPC_PROTOCOL,
        "producerDataSet": [],
        "consumerDataSet": [],
    }
    if client_type == pb.PRODUCER:
        body["producerDataSet"] = [{"groupName": t} for t in producer_topics or []]
    elif client_type in _CONSUME_TYPES and group:
        body["consumerDataSet"] = [
            {
                "groupName": group,
                "consumeType": _CONSUME_TYPES[client_type],
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",  # pop starts new groups at the queues' minimum
                "subscriptionDataSet": [s.to_dict() for s in subs or []],
            }
        ]
    return body


__all__ = [
    "GRPC_PROTOCOL",
    "MESSAGE_GROUP_PROP",
    "MappingError",
    "Outgoing",
    "check_type",
    "client_language",
    "client_version_code",
    "duration",
    "effective_type",
    "error_status",
    "heartbeat_body",
    "message_types",
    "millis",
    "route_queues",
    "status",
    "subscriptions",
    "timestamp",
    "to_pymq",
    "to_v2",
    "unwrap_handle",
    "unwrap_handle_offset",
    "wrap_handle",
]
