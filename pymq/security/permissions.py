"""What each request code needs: admin, or a permission on the topics and groups it names.

One table, built from the typed headers' wire names (``protocol/requests.py``), so the
field the ACL reads is the field the handler reads. A code missing from the table needs
admin (new codes are closed until someone decides otherwise). Retry and dead-letter
topics (``%RETRY%g``, ``%DLQ%g``) are checked as their group with SUB, as RocketMQ does.

A field a request may leave out but the server can find from the rest of it (END_TRANSACTION's
topic: the topic of the half message it names) is :attr:`Requirement.resolved`; the server
passes a :data:`Resolver` per request code (the broker reads the half message), so this module
stays free of the broker and its store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pymq.protocol.codes import RequestCode as C
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.requests import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    AckMessageRequest,
    BatchAckRequest,
    ChangeInvisibleTimeRequest,
    ConsumerGroupRequest,
    ConsumerSendMsgBackRequest,
    ConsumeStatsRequest,
    EndTransactionRequest,
    PopMessageRequest,
    PullMessageRequest,
    QueryConsumerOffsetRequest,
    QueryMessageRequest,
    QueryQueueOffsetsRequest,
    QueueOffsetRequest,
    ResetOffsetRequest,
    SearchOffsetRequest,
    SendMessageRequest,
    TopicRequest,
    UnregisterClientRequest,
    UpdateConsumerOffsetRequest,
    WaitQueueArrivalRequest,
)
from pymq.protocol.requests_many import read_queues
from pymq.security.acl import ANY, PUB, SUB

TOPIC = 0
GROUP = 1
#: (TOPIC or GROUP, resource name, needed permission)
Need = tuple[int, str, int]


@dataclass(frozen=True, slots=True)
class Requirement:
    """What one request code needs: admin, and/or permissions on named header fields or its body."""

    admin: bool = False
    #: (TOPIC or GROUP, wire field name, needed permission)
    fields: tuple[tuple[int, str, int], ...] = ()
    #: resources named in the body (heartbeats, lock requests)
    body: Callable[[Command], list[Need]] | None = None
    #: wire fields of ``fields`` the request must carry (else refused): a request that could leave
    #: its resource out would need no permission at all
    required: frozenset[str] = frozenset()
    #: wire fields of ``fields`` a request may leave out when the server finds them from the rest of
    #: it (a :data:`Resolver` for the code); without a resolver they are required
    resolved: frozenset[str] = frozenset()


#: the value of the :attr:`Requirement.resolved` field a request left out, found from the rest of
#: it (the broker: the real topic of the half message an END_TRANSACTION names by commitlog
#: offset); raises :class:`ResourceNotFound` when there is none
Resolver = Callable[[Command], str]


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else str(value)


def resource(kind: int, name: str, perm: int) -> Need:
    """A topic need, with retry/DLQ topics turned into their group's SUB."""
    if kind == TOPIC:
        if name.startswith(RETRY_PREFIX):
            return (GROUP, name[len(RETRY_PREFIX) :], SUB)
        if name.startswith(DLQ_PREFIX):
            return (GROUP, name[len(DLQ_PREFIX) :], SUB)
    return (kind, name, perm)


class BodyNotUnderstood(ValueError):
    """A body whose resources cannot be told: refused, so a handler never acts on an unchecked part."""


class ResourceNotNamed(ValueError):
    """A request lacking a field its permission check needs (:attr:`Requirement.required`)."""


class ResourceNotFound(ValueError):
    """A :data:`Resolver` found nothing the request names (refused: what cannot be checked is not allowed)."""


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyNotUnderstood(f"{what} must be a list")
    return value


def _heartbeat_needs(cmd: Command) -> list[Need]:
    """Each consumer group SUB, each subscribed topic SUB (producer groups are not checked).

    Strict: the handler registers entries one by one, so an entry the check could not read
    must stop the request here, not halfway through the handler."""
    try:
        body = decode_body(cmd.body, "heartbeat")
    except Exception as exc:
        raise BodyNotUnderstood("undecodable heartbeat") from exc
    if not isinstance(body, dict):
        raise BodyNotUnderstood("heartbeat body must be a map")
    needs: list[Need] = []
    for c in _list(body.get("consumerDataSet"), "consumerDataSet"):
        if not isinstance(c, dict) or "groupName" not in c:
            raise BodyNotUnderstood("each consumer entry needs a groupName")
        needs.append((GROUP, str(c["groupName"]), SUB))
        for s in _list(c.get("subscriptionDataSet"), "subscriptionDataSet"):
            if not isinstance(s, dict) or "topic" not in s:
                raise BodyNotUnderstood("each subscription needs a topic")
            needs.append(resource(TOPIC, str(s["topic"]), SUB))
    return needs


def _lock_needs(cmd: Command) -> list[Need]:
    try:
        body = decode_body(cmd.body, "lock body")
    except Exception as exc:
        raise BodyNotUnderstood("undecodable lock body") from exc
    if not isinstance(body, dict) or "consumerGroup" not in body:
        raise BodyNotUnderstood("lock body needs a consumerGroup")
    return [(GROUP, str(body["consumerGroup"]), SUB)]


def _queues_needs(cmd: Command) -> list[Need]:
    """SUB on each topic a many-queue request names (the group is a header field)."""
    with_offset = cmd.code == C.WAIT_QUEUE_ARRIVAL
    try:
        rows = read_queues(cmd.body, with_offset=with_offset)
    except Exception as exc:
        raise BodyNotUnderstood("undecodable queue list") from exc
    return [resource(TOPIC, topic, SUB) for topic in sorted({r[0] for r in rows})]


def _w(header: Any, attr: str) -> str:
    wire: dict[str, str] = header.WIRE
    return wire[attr]


ADMIN = Requirement(admin=True)
#: signed by a known account, nothing more (cluster-wide reads, liveness)
AUTHENTICATED = Requirement()

REQUIREMENTS: dict[int, Requirement] = {
    # produce
    C.SEND_MESSAGE: Requirement(fields=((TOPIC, _w(SendMessageRequest, "topic"), PUB),)),
    C.SEND_BATCH_MESSAGE: Requirement(fields=((TOPIC, _w(SendMessageRequest, "topic"), PUB),)),
    C.CONSUMER_SEND_MSG_BACK: Requirement(fields=((GROUP, _w(ConsumerSendMsgBackRequest, "group"), SUB),)),
    # consume
    C.PULL_MESSAGE: Requirement(
        fields=(
            (TOPIC, _w(PullMessageRequest, "topic"), SUB),
            (GROUP, _w(PullMessageRequest, "consumer_group"), SUB),
        )
    ),
    C.QUERY_CONSUMER_OFFSET: Requirement(
        fields=(
            (TOPIC, _w(QueryConsumerOffsetRequest, "topic"), SUB),
            (GROUP, _w(QueryConsumerOffsetRequest, "consumer_group"), SUB),
        )
    ),
    C.UPDATE_CONSUMER_OFFSET: Requirement(
        fields=(
            (TOPIC, _w(UpdateConsumerOffsetRequest, "topic"), SUB),
            (GROUP, _w(UpdateConsumerOffsetRequest, "consumer_group"), SUB),
        )
    ),
    # many queues at once (issue 36): the group, and SUB on every topic of the body
    C.QUERY_QUEUE_OFFSETS: Requirement(
        fields=((GROUP, _w(QueryQueueOffsetsRequest, "consumer_group"), SUB),),
        body=_queues_needs,
        required=frozenset({_w(QueryQueueOffsetsRequest, "consumer_group")}),
    ),
    C.WAIT_QUEUE_ARRIVAL: Requirement(
        fields=((GROUP, _w(WaitQueueArrivalRequest, "consumer_group"), SUB),),
        body=_queues_needs,
        required=frozenset({_w(WaitQueueArrivalRequest, "consumer_group")}),
    ),
    C.GET_MAX_OFFSET: Requirement(fields=((TOPIC, _w(QueueOffsetRequest, "topic"), ANY),)),
    C.GET_MIN_OFFSET: Requirement(fields=((TOPIC, _w(QueueOffsetRequest, "topic"), ANY),)),
    C.GET_EARLIEST_MSG_STORETIME: Requirement(fields=((TOPIC, _w(QueueOffsetRequest, "topic"), ANY),)),
    C.SEARCH_OFFSET_BY_TIMESTAMP: Requirement(fields=((TOPIC, _w(SearchOffsetRequest, "topic"), ANY),)),
    C.QUERY_MESSAGE: Requirement(fields=((TOPIC, _w(QueryMessageRequest, "topic"), SUB),)),
    C.HEART_BEAT: Requirement(body=_heartbeat_needs),
    C.UNREGISTER_CLIENT: Requirement(fields=((GROUP, _w(UnregisterClientRequest, "consumer_group"), SUB),)),
    C.GET_CONSUMER_LIST_BY_GROUP: Requirement(fields=((GROUP, _w(ConsumerGroupRequest, "consumer_group"), SUB),)),
    C.LOCK_BATCH_MQ: Requirement(body=_lock_needs),
    C.UNLOCK_BATCH_MQ: Requirement(body=_lock_needs),
    C.GET_CONSUME_STATS: Requirement(
        fields=(
            (GROUP, _w(ConsumeStatsRequest, "consumer_group"), SUB),
            (TOPIC, _w(ConsumeStatsRequest, "topic"), ANY),
        )
    ),
    C.GET_CONSUMER_CONNECTION_LIST: Requirement(fields=((GROUP, _w(ConsumerGroupRequest, "consumer_group"), SUB),)),
    C.GET_TOPIC_STATS_INFO: Requirement(fields=((TOPIC, _w(TopicRequest, "topic"), ANY),)),
    C.RESET_CONSUMER_OFFSET: Requirement(
        admin=True,
        fields=((GROUP, _w(ResetOffsetRequest, "group"), SUB), (TOPIC, _w(ResetOffsetRequest, "topic"), ANY)),
    ),
    # pop consumption (SimpleConsumer): the topic and the group, as a pull
    C.POP_MESSAGE: Requirement(
        fields=((TOPIC, _w(PopMessageRequest, "topic"), SUB), (GROUP, _w(PopMessageRequest, "consumer_group"), SUB))
    ),
    C.ACK_MESSAGE: Requirement(
        fields=((TOPIC, _w(AckMessageRequest, "topic"), SUB), (GROUP, _w(AckMessageRequest, "consumer_group"), SUB))
    ),
    C.BATCH_ACK_MESSAGE: Requirement(
        fields=((TOPIC, _w(BatchAckRequest, "topic"), SUB), (GROUP, _w(BatchAckRequest, "consumer_group"), SUB))
    ),
    C.CHANGE_MESSAGE_INVISIBLETIME: Requirement(
        fields=(
            (TOPIC, _w(ChangeInvisibleTimeRequest, "topic"), SUB),
            (GROUP, _w(ChangeInvisibleTimeRequest, "consumer_group"), SUB),
        )
    ),
    # transactions: PUB on the half message's real topic, as RocketMQ 5. The topic is optional on the
    # wire (RocketMQ 4 clients do not send it): the broker then finds it from the half message the
    # request names; when given, the broker checks it is the half's real topic
    C.END_TRANSACTION: Requirement(
        fields=((TOPIC, _w(EndTransactionRequest, "topic"), PUB),),
        resolved=frozenset({_w(EndTransactionRequest, "topic")}),
    ),
    # cluster-wide reads any account may make
    C.GET_TIMER_METRICS: AUTHENTICATED,
    C.GET_ALL_TOPIC_CONFIG: AUTHENTICATED,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: AUTHENTICATED,
    C.GET_ALL_CONSUMER_OFFSET: AUTHENTICATED,
    C.GET_ALL_DELAY_OFFSET: AUTHENTICATED,
    C.GET_TIMER_CHECK_POINT: AUTHENTICATED,
    C.GET_BROKER_RUNTIME_INFO: AUTHENTICATED,
    C.GET_TOPIC_TRAFFIC: AUTHENTICATED,
    C.GET_ALL_PRODUCER_INFO: ADMIN,
    C.GET_ACL_ACCOUNTS: ADMIN,
    C.GET_BROKER_CLUSTER_INFO: AUTHENTICATED,
    C.CONTROLLER_STATUS: AUTHENTICATED,
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: AUTHENTICATED,
    C.PING: AUTHENTICATED,
    # (answered by the interceptor itself: a challenge needs no account, an open the signature's)
    C.SESSION_CHALLENGE: AUTHENTICATED,
    C.SESSION_OPEN: AUTHENTICATED,
    # nameserver: reading a topic's route needs some permission on it
    C.GET_ROUTEINFO_BY_TOPIC: Requirement(fields=((TOPIC, _w(TopicRequest, "topic"), ANY),)),
    # admin (RocketMQ's admin codes, plus registration, config reads, message reads by offset, HA)
    C.UPDATE_AND_CREATE_TOPIC: ADMIN,
    C.DELETE_TOPIC_IN_BROKER: ADMIN,
    C.DELETE_TOPIC_IN_NAMESRV: ADMIN,
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ADMIN,
    C.DELETE_SUBSCRIPTIONGROUP: ADMIN,
    C.UPDATE_BROKER_CONFIG: ADMIN,
    C.GET_BROKER_CONFIG: ADMIN,
    C.VIEW_MESSAGE_BY_ID: ADMIN,
    C.REGISTER_BROKER: ADMIN,
    C.UNREGISTER_BROKER: ADMIN,
    C.HA_PULL_COMMITLOG: ADMIN,
    C.NOTIFY_BROKER_ROLE_CHANGED: ADMIN,
    # the failover controller (issue 32): brokers heartbeat with their (admin) account
    C.CONTROLLER_HEARTBEAT: ADMIN,
    C.CONTROLLER_ELECT_MASTER: ADMIN,
    C.GET_PENDING_HALF_MESSAGES: ADMIN,
    # the pop receipt handle secret (issue 32): slaves copy it with their (admin) account
    C.GET_POP_SECRET: ADMIN,
    # a consumer client's running info and stacks (issue 33): the broker relays it to the client
    C.GET_CONSUMER_RUNNING_INFO: ADMIN,
    C.CONSUME_MESSAGE_DIRECTLY: ADMIN,
    C.UPDATE_AND_CREATE_ACL_CONFIG: ADMIN,
    C.DELETE_ACL_CONFIG: ADMIN,
}


def requirement(code: int) -> Requirement:
    """The table's entry; admin for codes it does not list."""
    return REQUIREMENTS.get(code, ADMIN)


def needs(req: Requirement, cmd: Command, resolvers: Mapping[int, Resolver] | None = None) -> list[Need]:
    """The topic and group permissions ``cmd`` needs (header fields it lacks are the handler's to
    refuse, unless :attr:`Requirement.required`: ResourceNotNamed, or :attr:`Requirement.resolved`:
    found by ``resolvers[cmd.code]``, ResourceNotNamed without one); raises BodyNotUnderstood for a
    body whose resources cannot be read, ResourceNotFound when a resolver finds nothing."""
    out: list[Need] = []
    ext = cmd.ext
    for kind, name, perm in req.fields:
        value = _text(ext.get(name))
        if value:
            out.append(resource(kind, value, perm))
        elif name in req.resolved:
            resolve = resolvers.get(cmd.code) if resolvers else None
            if resolve is None:
                raise ResourceNotNamed(f"request names no {name}")
            out.append(resource(kind, resolve(cmd), perm))
        elif name in req.required:
            raise ResourceNotNamed(f"request names no {name}")
    if req.body is not None:
        out += req.body(cmd)
    return out
