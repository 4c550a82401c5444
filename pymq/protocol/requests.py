"""Typed request and response headers: the one source of truth for field names, flags and prefixes.

Every request the broker and the nameserver serve has a header class here (the pop,
transaction, replication and many-queue ones in :mod:`~pymq.protocol.requests_pop`,
:mod:`~pymq.protocol.requests_transaction`, :mod:`~pymq.protocol.requests_replication` and
:mod:`~pymq.protocol.requests_many`,
re-exported here; the generator below in :mod:`~pymq.protocol.wire_header`), shared by the
client (which builds it and calls :meth:`Header.to_ext`) and the server (which calls
:meth:`Header.from_ext` on the received ext map). Attributes are snake_case; on the wire
they keep RocketMQ's camelCase names (``queue_id`` <-> ``queueId``); the few that do not
follow that rule are listed in the class's ``WIRE_NAMES``.

RocketMQ carries every header value as a string, so :meth:`Header.from_ext` coerces
strings to the declared type (via :mod:`pymq.protocol.headers`) and raises
:class:`~pymq.errors.InvalidRequestError` naming the missing or ill-typed wire field.

``from_ext`` and ``to_ext`` are generated per class when it is defined (as dataclasses
generate ``__init__``): straight-line code, one dict lookup and one type check per field,
so parsing a SEND_MESSAGE or PULL_MESSAGE header costs no loop and no reflection (and
less than the ``get_int``/``get_str`` calls it replaces). ``build_ext(**fields)`` makes
the ext map without the object, for responses built on every request.

Fields typed ``X | None`` with default ``None`` are optional: absent from the ext map when
``None``. A field with no default is required.

Every integer field is range-checked after coercion (one chained comparison against
constants baked into the generated code): int64 unless declared narrower with
:func:`bounded` (``max_msg_nums: int = bounded(32, lo=1, hi=1024)``). A value outside its
range is an InvalidRequestError naming the field, never clamped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pymq.errors import InvalidRequestError

# The ``import X as X`` lines re-export the machinery (wire_header) and the pop, transaction and
# replication headers, which live in their own modules: ``from pymq.protocol.requests import X``
# keeps working for every header and constant.
from pymq.protocol.requests_many import MAX_QUEUES_PER_REQUEST as MAX_QUEUES_PER_REQUEST
from pymq.protocol.requests_many import QueryQueueOffsetsRequest as QueryQueueOffsetsRequest
from pymq.protocol.requests_many import WaitQueueArrivalRequest as WaitQueueArrivalRequest
from pymq.protocol.requests_operator import ConsumeMessageDirectlyRequest as ConsumeMessageDirectlyRequest
from pymq.protocol.requests_pop import MAX_BATCH_ACK as MAX_BATCH_ACK
from pymq.protocol.requests_pop import MAX_INVISIBLE_MS as MAX_INVISIBLE_MS
from pymq.protocol.requests_pop import MAX_POP_MSG_NUMS as MAX_POP_MSG_NUMS
from pymq.protocol.requests_pop import MIN_INVISIBLE_MS as MIN_INVISIBLE_MS
from pymq.protocol.requests_pop import POP_INIT_MAX as POP_INIT_MAX
from pymq.protocol.requests_pop import POP_INIT_MIN as POP_INIT_MIN
from pymq.protocol.requests_pop import AckMessageRequest as AckMessageRequest
from pymq.protocol.requests_pop import BatchAckRequest as BatchAckRequest
from pymq.protocol.requests_pop import ChangeInvisibleTimeRequest as ChangeInvisibleTimeRequest
from pymq.protocol.requests_pop import ChangeInvisibleTimeResponse as ChangeInvisibleTimeResponse
from pymq.protocol.requests_pop import PopMessageRequest as PopMessageRequest
from pymq.protocol.requests_pop import PopMessageResponse as PopMessageResponse
from pymq.protocol.requests_replication import BrokerRoleChangeRequest as BrokerRoleChangeRequest
from pymq.protocol.requests_replication import ControllerAssignment as ControllerAssignment
from pymq.protocol.requests_replication import ControllerElectRequest as ControllerElectRequest
from pymq.protocol.requests_replication import ControllerHeartbeatRequest as ControllerHeartbeatRequest
from pymq.protocol.requests_transaction import CheckTransactionStateRequest as CheckTransactionStateRequest
from pymq.protocol.requests_transaction import EndTransactionRequest as EndTransactionRequest
from pymq.protocol.requests_transaction import PendingHalfMessagesRequest as PendingHalfMessagesRequest
from pymq.protocol.route import PERM_READ_WRITE, MessageQueue
from pymq.protocol.wire_header import I32_MAX as I32_MAX
from pymq.protocol.wire_header import I64_MAX as I64_MAX
from pymq.protocol.wire_header import I64_MIN as I64_MIN
from pymq.protocol.wire_header import Header as Header
from pymq.protocol.wire_header import bounded as bounded
from pymq.protocol.wire_header import camel as camel
from pymq.protocol.wire_header import wire_header as wire_header

# --- shared constants --------------------------------------------------------------------------------

#: PULL_MESSAGE ``sysFlag`` bits (RocketMQ's PullSysFlag).
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

#: A pull's byte budget when the request names none.
DEFAULT_PULL_MAX_BYTES = 4 * 1024 * 1024
#: The most messages one pull may ask for (RocketMQ's pullBatchSize range is 1..1024).
MAX_PULL_MSG_NUMS = 1024

#: ``%RETRY%<group>``: where a group's failed messages wait for their next attempt.
RETRY_PREFIX = "%RETRY%"
#: ``%DLQ%<group>``: where a group's messages go once their retries are used up.
DLQ_PREFIX = "%DLQ%"
#: The template topic whose route a producer borrows for a topic the broker auto-creates.
AUTO_CREATE_TOPIC = "TBW102"


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def pop_retry_topic(group: str, topic: str) -> str:
    """``%RETRY%<group>_<topic>``: where a pop group's unacked messages of ``topic`` come back (RocketMQ's v1 name)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


# --- produce -----------------------------------------------------------------------------------------


@wire_header
@dataclass(slots=True, kw_only=True)
class SendMessageRequest(Header):
    """SEND_MESSAGE and SEND_BATCH_MESSAGE; the body is the encoded record(s)."""

    topic: str
    #: negative (-1): the broker picks a queue; at most the topic's write queues - 1 (checked by the handler)
    queue_id: int = bounded(-1, lo=-(2**31), hi=I32_MAX)
    producer_group: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class SendMessageResponse(Header):
    """Where the messages went; ``statuses`` only when some were refused."""

    queue_id: int
    #: of the first stored message, -1 if none was stored
    queue_offset: int
    commit_log_offsets: list[int] = field(default_factory=list)
    statuses: list[int] | None = None


# --- consume -----------------------------------------------------------------------------------------


@wire_header
@dataclass(slots=True, kw_only=True)
class PullMessageRequest(Header):
    """PULL_MESSAGE; ``sys_flag`` carries FLAG_COMMIT_OFFSET / FLAG_SUSPEND / FLAG_SUBSCRIPTION."""

    consumer_group: str
    topic: str
    #: at most the topic's read queues - 1 (checked by the handler)
    queue_id: int = bounded(lo=0, hi=I32_MAX)
    queue_offset: int
    #: RocketMQ's clients refuse a pullBatchSize outside 1..1024; the broker refuses it too
    #: (a pull may still return fewer: ``max_msg_bytes`` and what is stored limit it)
    max_msg_nums: int = bounded(32, lo=1, hi=MAX_PULL_MSG_NUMS)
    #: RocketMQ 5's optional maxMsgBytes: at most this many bytes of records (at least one record)
    max_msg_bytes: int = bounded(DEFAULT_PULL_MAX_BYTES, lo=1, hi=I32_MAX)
    sys_flag: int = bounded(0, lo=0, hi=I32_MAX)
    #: committed with the pull when FLAG_COMMIT_OFFSET is set (-1: nothing to commit)
    commit_offset: int = -1
    #: how long the broker may hold a pull that finds nothing (with FLAG_SUSPEND)
    suspend_timeout_millis: int = 0
    #: tag expression (``*`` or ``a || b``); None matches everything
    subscription: str | None = None
    sub_version: int = 0


@wire_header
@dataclass(slots=True, kw_only=True)
class PullMessageResponse(Header):
    """A pull's offsets; the body holds the stored records."""

    next_begin_offset: int
    min_offset: int = 0
    max_offset: int = 0
    suggest_which_broker_id: int = 0


@wire_header
@dataclass(slots=True, kw_only=True)
class ConsumerSendMsgBackRequest(Header):
    """CONSUMER_SEND_MSG_BACK: retry (or dead-letter) the message at commitlog ``offset``."""

    offset: int
    group: str
    #: 0: the broker picks (3 + reconsume times); negative: straight to the dead-letter queue
    delay_level: int = 0
    origin_msg_id: str = ""
    origin_topic: str | None = None
    #: -1: the group's retryMaxTimes
    max_reconsume_times: int = -1


# --- offsets -----------------------------------------------------------------------------------------


@wire_header
@dataclass(slots=True, kw_only=True)
class QueryConsumerOffsetRequest(Header):
    """QUERY_CONSUMER_OFFSET; answered with an :class:`OffsetResponse`."""

    consumer_group: str
    topic: str
    queue_id: int


@wire_header
@dataclass(slots=True, kw_only=True)
class UpdateConsumerOffsetRequest(Header):
    """UPDATE_CONSUMER_OFFSET (usually oneway)."""

    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@wire_header
@dataclass(slots=True, kw_only=True)
class QueueOffsetRequest(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET and GET_EARLIEST_MSG_STORETIME: one queue of a topic."""

    topic: str
    queue_id: int


@wire_header
@dataclass(slots=True, kw_only=True)
class SearchOffsetRequest(Header):
    """SEARCH_OFFSET_BY_TIMESTAMP: the first offset stored at or after ``timestamp`` (ms)."""

    topic: str
    queue_id: int
    timestamp: int


@wire_header
@dataclass(slots=True, kw_only=True)
class OffsetResponse(Header):
    """The answer to QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int


@wire_header
@dataclass(slots=True, kw_only=True)
class StoreTimeResponse(Header):
    """The answer to GET_EARLIEST_MSG_STORETIME (ms)."""

    timestamp: int


@wire_header
@dataclass(slots=True, kw_only=True)
class ConsumeStatsRequest(Header):
    """GET_CONSUME_STATS: the group's progress, on one topic or on all it consumes."""

    consumer_group: str
    topic: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class ResetOffsetRequest(Header):
    """RESET_CONSUMER_OFFSET (admin -> broker) and RESET_CONSUMER_CLIENT_OFFSET (broker -> client push).

    ``timestamp`` in ms; -1 the latest offsets, -2 the earliest.
    """

    group: str
    topic: str
    timestamp: int


# --- clients -----------------------------------------------------------------------------------------


@wire_header
@dataclass(slots=True, kw_only=True)
class UnregisterClientRequest(Header):
    """UNREGISTER_CLIENT: a client leaves a producer and/or consumer group."""

    WIRE_NAMES: ClassVar[Mapping[str, str]] = {"client_id": "clientID"}

    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class ConsumerGroupRequest(Header):
    """GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST and NOTIFY_CONSUMER_IDS_CHANGED."""

    consumer_group: str


@wire_header
@dataclass(slots=True, kw_only=True)
class ConsumerRunningInfoRequest(Header):
    """GET_CONSUMER_RUNNING_INFO (RocketMQ's GetConsumerRunningInfoRequestHeader): admin -> broker, and
    the same header broker -> the named client. ``jstack_enable``: add the process's stacks."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@dataclass(slots=True)
class LockBatchBody:
    """The body of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ (msgpack map)."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue]

    def to_body(self) -> dict[str, Any]:
        return {
            "consumerGroup": self.consumer_group,
            "clientId": self.client_id,
            "mqSet": [mq.to_dict() for mq in self.mq_set],
        }

    @classmethod
    def from_body(cls, body: object) -> LockBatchBody:
        if not isinstance(body, dict):
            raise InvalidRequestError("lock body must be a map")
        try:
            return cls(
                str(body["consumerGroup"]),
                str(body["clientId"]),
                [MessageQueue.from_dict(m) for m in body["mqSet"]],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"bad lock body: {exc}") from exc


#: the key of LOCK_BATCH_MQ's answer body: the queues now locked by the caller
LOCK_OK_MQ_SET = "lockOKMQSet"

# --- messages ----------------------------------------------------------------------------------------


@wire_header
@dataclass(slots=True, kw_only=True)
class QueryMessageRequest(Header):
    """QUERY_MESSAGE: messages with a key (or unique id) stored between two times (ms)."""

    topic: str
    key: str
    max_num: int = 32
    begin_timestamp: int = 0
    end_timestamp: int = 2**62


@wire_header
@dataclass(slots=True, kw_only=True)
class ViewMessageRequest(Header):
    """VIEW_MESSAGE_BY_ID: the record at a commitlog offset."""

    offset: int


# --- topic and group admin ---------------------------------------------------------------------------


@wire_header
@dataclass(slots=True, kw_only=True)
class CreateTopicRequest(Header):
    """UPDATE_AND_CREATE_TOPIC; queue numbers default to the broker's ``default_topic_queue_nums``."""

    topic: str
    read_queue_nums: int | None = None
    write_queue_nums: int | None = None
    perm: int = PERM_READ_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5 topic attributes, ``+key=value,...`` (issue 17: ``+priority.levels=10``)
    attributes: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class TopicRequest(Header):
    """Requests naming only a topic: DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO,
    GET_ROUTEINFO_BY_TOPIC and DELETE_TOPIC_IN_NAMESRV."""

    topic: str


@wire_header
@dataclass(slots=True, kw_only=True)
class DeleteSubscriptionGroupRequest(Header):
    """DELETE_SUBSCRIPTIONGROUP."""

    group_name: str


# --- nameserver --------------------------------------------------------------------------------------


@wire_header
@dataclass(slots=True, kw_only=True)
class RegisterBrokerRequest(Header):
    """REGISTER_BROKER; the body carries the broker's topic table and its data version."""

    broker_addr: str
    broker_name: str
    cluster_name: str
    broker_id: int
    ha_server_addr: str = ""


@wire_header
@dataclass(slots=True, kw_only=True)
class RegisterBrokerResponse(Header):
    """The group's master (for a slave to follow)."""

    master_addr: str | None = None
    ha_server_addr: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class UnregisterBrokerRequest(Header):
    """UNREGISTER_BROKER."""

    broker_addr: str
    broker_name: str
    cluster_name: str
    broker_id: int
