"""Every request the client sends to a broker or a nameserver, built in one place.

Headers come from the typed classes of :mod:`pymq.protocol.requests` (the one source of
field names, flags and prefixes, shared with the broker); the producer, consumers,
send-back, offset stores, orderly locks, the queue reader and the admin client build
their requests here instead of writing ext dicts of their own.

Sends and pulls are the exception to "build a header object": they are the hot paths, so
:func:`send_message` and :func:`pull_message` write the wire names (taken once from
:class:`~pymq.protocol.requests.SendMessageRequest` / ``PullMessageRequest``) straight into
the ext dict, and :func:`read_pull_offsets` reads the answer without building an object (the
producer reads a send's answer inline): no allocation beyond the ext dict the client always sent.
"""

from __future__ import annotations

from typing import Any

from pymq.errors import InvalidRequestError, RemoteProtocolError
from pymq.protocol.codes import RequestCode
from pymq.protocol.filter import Subscription
from pymq.protocol.frame import Body, Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    POP_INIT_MIN,
    AckMessageRequest,
    BatchAckRequest,
    ChangeInvisibleTimeRequest,
    ChangeInvisibleTimeResponse,
    ConsumerGroupRequest,
    ConsumerRunningInfoRequest,
    ConsumerSendMsgBackRequest,
    ConsumeStatsRequest,
    CreateTopicRequest,
    EndTransactionRequest,
    LockBatchBody,
    PendingHalfMessagesRequest,
    PopMessageRequest,
    PopMessageResponse,
    PullMessageRequest,
    PullMessageResponse,
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
    ViewMessageRequest,
    WaitQueueArrivalRequest,
)
from pymq.protocol.requests_many import queues_body, read_list
from pymq.protocol.requests_operator import ConsumeMessageDirectlyRequest
from pymq.protocol.route import PERM_READ_WRITE, MessageQueue, encode_attributes

# --- produce (hot path) ------------------------------------------------------------------------------

_SEND_TOPIC = SendMessageRequest.WIRE["topic"]
_SEND_QUEUE_ID = SendMessageRequest.WIRE["queue_id"]
_SEND_GROUP = SendMessageRequest.WIRE["producer_group"]
_SEND = int(RequestCode.SEND_MESSAGE)
_END_TRANSACTION = int(RequestCode.END_TRANSACTION)
_SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)


def send_message(topic: str, queue_id: int, group: str | None, records: Body, *, batch: bool = False) -> Command:
    """SEND_MESSAGE (or SEND_BATCH_MESSAGE) of encoded records to one queue."""
    ext: dict[str, Any] = {_SEND_TOPIC: topic, _SEND_QUEUE_ID: queue_id}
    if group is not None:
        ext[_SEND_GROUP] = group
    return Command(_SEND_BATCH if batch else _SEND, 0, 0, None, ext, records)


# --- consume -----------------------------------------------------------------------------------------


_PULL = int(RequestCode.PULL_MESSAGE)
_PULL_WIRE = PullMessageRequest.WIRE
_P_GROUP, _P_TOPIC, _P_QUEUE_ID, _P_OFFSET, _P_MAX_NUMS, _P_SYS_FLAG = (
    _PULL_WIRE[f] for f in ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "sys_flag")
)
_P_COMMIT, _P_SUSPEND, _P_SUBSCRIPTION, _P_SUB_VERSION = (
    _PULL_WIRE[f] for f in ("commit_offset", "suspend_timeout_millis", "subscription", "sub_version")
)
_P_MAX_BYTES = _PULL_WIRE["max_msg_bytes"]


def pull_message(
    group: str,
    mq: MessageQueue,
    offset: int,
    *,
    max_nums: int,
    subscription: Subscription | None = None,
    tags: str | None = None,
    commit_offset: int = -1,
    suspend_ms: int = 0,
    max_bytes: int | None = None,
) -> Command:
    """PULL_MESSAGE from ``offset``; with ``subscription`` (or bare ``tags``) the broker filters by tag.

    ``max_bytes``: the answer holds at most this many bytes of records (at least one record);
    None leaves it to the broker's default (``maxMsgBytes`` is optional: older peers ignore it).

    A pull per batch is on the consumer's hot loop, so the ext dict is written directly with
    :class:`~pymq.protocol.requests.PullMessageRequest`'s wire names; no subscription is left
    out (as ``to_ext`` does).
    """
    flags = 0
    ext: dict[str, Any] = {_P_GROUP: group, _P_TOPIC: mq.topic, _P_QUEUE_ID: mq.queueId, _P_OFFSET: offset}
    ext[_P_MAX_NUMS] = max_nums
    if max_bytes is not None:
        ext[_P_MAX_BYTES] = max_bytes
    if subscription is not None:
        flags = FLAG_SUBSCRIPTION
        ext[_P_SUBSCRIPTION] = subscription.expression
        ext[_P_SUB_VERSION] = subscription.version
    elif tags is not None:
        flags = FLAG_SUBSCRIPTION
        ext[_P_SUBSCRIPTION] = tags
    if commit_offset >= 0:
        flags |= FLAG_COMMIT_OFFSET
    ext[_P_COMMIT] = commit_offset
    if suspend_ms > 0:
        flags |= FLAG_SUSPEND
    ext[_P_SUSPEND] = suspend_ms
    ext[_P_SYS_FLAG] = flags
    return Command(_PULL, 0, 0, None, ext)


_NEXT_BEGIN = PullMessageResponse.WIRE["next_begin_offset"]
_MIN_OFFSET = PullMessageResponse.WIRE["min_offset"]
_MAX_OFFSET = PullMessageResponse.WIRE["max_offset"]


def read_pull_offsets(resp: Command, offset: int) -> tuple[int, int, int]:
    """``(next begin offset, min offset, max offset)`` of a pull answer (``offset`` if it names no next)."""
    ext = resp.ext
    return int(ext.get(_NEXT_BEGIN, offset)), int(ext.get(_MIN_OFFSET, 0)), int(ext.get(_MAX_OFFSET, 0))


# --- slave reads (issue 16) ---
_SUGGEST = PullMessageResponse.WIRE["suggest_which_broker_id"]


def read_pull_suggestion(resp: Command) -> int:
    """The broker id a pull answer suggests pulling from next (0: the master)."""
    return int(resp.ext.get(_SUGGEST, 0))


def send_msg_back(
    group: str, commitlog_offset: int, msg_id: str, origin_topic: str, *, delay_level: int, max_reconsume_times: int
) -> Command:
    """CONSUMER_SEND_MSG_BACK: retry (or with a negative delay level, dead-letter) a stored message."""
    header = ConsumerSendMsgBackRequest(
        offset=commitlog_offset,
        group=group,
        delay_level=delay_level,
        origin_msg_id=msg_id,
        origin_topic=origin_topic,
        max_reconsume_times=max_reconsume_times,
    )
    return Command.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext())


def lock_batch(group: str, client_id: str, mqs: list[MessageQueue], *, unlock: bool = False) -> Command:
    """LOCK_BATCH_MQ (or UNLOCK_BATCH_MQ) for queues of one master."""
    code = RequestCode.UNLOCK_BATCH_MQ if unlock else RequestCode.LOCK_BATCH_MQ
    return Command.request(code, body=encode_body(LockBatchBody(group, client_id, mqs).to_body()))


# --- offsets -----------------------------------------------------------------------------------------


def query_consumer_offset(group: str, topic: str, queue_id: int) -> Command:
    header = QueryConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id)
    return Command.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext())


def update_consumer_offset(group: str, topic: str, queue_id: int, offset: int) -> Command:
    header = UpdateConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset)
    return Command.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext())


def queue_offset(code: int, topic: str, queue_id: int, timestamp: int | None = None) -> Command:
    """GET_MIN_OFFSET / GET_MAX_OFFSET, or SEARCH_OFFSET_BY_TIMESTAMP when ``timestamp`` (ms) is given."""
    if timestamp is not None:
        search = SearchOffsetRequest(topic=topic, queue_id=queue_id, timestamp=timestamp)
        return Command.request(code, search.to_ext())
    return Command.request(code, QueueOffsetRequest(topic=topic, queue_id=queue_id).to_ext())


# --- many queues at once (issue 36) ---------------------------------------------------------------------


def query_queue_offsets(group: str, mqs: list[MessageQueue], timestamp: int | None = None) -> Command:
    """QUERY_QUEUE_OFFSETS: committed, min, max (and by ``timestamp``) offsets of queues of one broker."""
    header = QueryQueueOffsetsRequest(consumer_group=group, timestamp=timestamp)
    return Command.request(
        RequestCode.QUERY_QUEUE_OFFSETS, header.to_ext(), queues_body([(mq.topic, mq.queueId) for mq in mqs])
    )


def read_queue_offsets(resp: Command, count: int) -> list[tuple[int, int, int, int]]:
    """``(committed, min, max, byTime)`` per queue of a QUERY_QUEUE_OFFSETS answer, in the request's order."""
    rows = read_list(resp.body, "offsets")
    if len(rows) != count:
        raise InvalidRequestError(f"asked for {count} queues' offsets, got {len(rows)}")
    return [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]


def wait_queue_arrival(group: str, waits: list[tuple[str, int, int]], suspend_ms: int) -> Command:
    """WAIT_QUEUE_ARRIVAL: held until one of ``(topic, queueId, offset)`` has a message at its offset."""
    header = WaitQueueArrivalRequest(consumer_group=group, suspend_timeout_millis=suspend_ms)
    return Command.request(RequestCode.WAIT_QUEUE_ARRIVAL, header.to_ext(), queues_body(waits))


def read_ready(resp: Command) -> list[int]:
    """The indexes of the waited queues that have messages (a WAIT_QUEUE_ARRIVAL answer)."""
    return [int(i) for i in read_list(resp.body, "ready")]


# --- clients -----------------------------------------------------------------------------------------


def heartbeat(client_id: str, producer_groups: list[str], consumers: list[dict[str, Any]]) -> Command:
    """HEART_BEAT: the client's producer groups and each consumer's data (group, model, subscriptions)."""
    body = {
        "clientID": client_id,
        "language": "PYTHON",
        "producerDataSet": [{"groupName": g} for g in producer_groups],
        "consumerDataSet": consumers,
    }
    return Command.request(RequestCode.HEART_BEAT, body=encode_body(body))


def unregister_client(client_id: str, producer_group: str | None, consumer_group: str | None) -> Command:
    header = UnregisterClientRequest(
        client_id=client_id, producer_group=producer_group or None, consumer_group=consumer_group or None
    )
    return Command.request(RequestCode.UNREGISTER_CLIENT, header.to_ext())


def consumer_group(code: int, group: str) -> Command:
    """GET_CONSUMER_LIST_BY_GROUP or GET_CONSUMER_CONNECTION_LIST."""
    return Command.request(code, ConsumerGroupRequest(consumer_group=group).to_ext())


def consumer_running_info(group: str, client_id: str, jstack: bool = False) -> Command:
    """GET_CONSUMER_RUNNING_INFO: a consumer client's running info, relayed by the broker (admin)."""
    header = ConsumerRunningInfoRequest(consumer_group=group, client_id=client_id, jstack_enable=jstack)
    return Command.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext())


def consume_message_directly(group: str, client_id: str, msg_id: str, topic: str | None = None) -> Command:
    """CONSUME_MESSAGE_DIRECTLY: a client of ``group`` (``client_id`` empty: any) consumes the stored message
    ``msg_id`` (its offset id, on the broker asked) with its listener, relayed by the broker (admin)."""
    header = ConsumeMessageDirectlyRequest(consumer_group=group, client_id=client_id, msg_id=msg_id, topic=topic)
    return Command.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, header.to_ext())


def acl_update(account: dict[str, Any]) -> Command:
    """UPDATE_AND_CREATE_ACL_CONFIG: one account (PlainAccessConfig names, msgpack) into the broker's ACL file."""
    return Command.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, None, encode_body(account))


def acl_delete(access_key: str) -> Command:
    """DELETE_ACL_CONFIG: one account out of the broker's ACL file."""
    return Command.request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key})


# --- nameserver --------------------------------------------------------------------------------------


def topic_request(code: int, topic: str) -> Command:
    """GET_ROUTEINFO_BY_TOPIC, DELETE_TOPIC_IN_NAMESRV, DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO."""
    return Command.request(code, TopicRequest(topic=topic).to_ext())


def plain(code: int, body: bytes = b"") -> Command:
    """A request with no header (cluster info, topic list, runtime info, broker config)."""
    return Command.request(code, None, body)


# --- admin -------------------------------------------------------------------------------------------


def create_topic(
    topic: str,
    queues: int,
    *,
    perm: int = PERM_READ_WRITE,
    order: bool = False,
    attributes: dict[str, str] | None = None,
) -> Command:
    header = CreateTopicRequest(
        topic=topic,
        read_queue_nums=queues,
        write_queue_nums=queues,
        perm=perm,
        order=order,
        attributes=encode_attributes(attributes) if attributes else None,
    )
    return Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())


def consume_stats(group: str, topic: str | None = None) -> Command:
    return Command.request(
        RequestCode.GET_CONSUME_STATS, ConsumeStatsRequest(consumer_group=group, topic=topic).to_ext()
    )


def reset_offset(group: str, topic: str, timestamp: int) -> Command:
    header = ResetOffsetRequest(group=group, topic=topic, timestamp=timestamp)
    return Command.request(RequestCode.RESET_CONSUMER_OFFSET, header.to_ext())


def query_message(topic: str, key: str, max_num: int, begin_timestamp: int, end_timestamp: int) -> Command:
    header = QueryMessageRequest(
        topic=topic, key=key, max_num=max_num, begin_timestamp=begin_timestamp, end_timestamp=end_timestamp
    )
    return Command.request(RequestCode.QUERY_MESSAGE, header.to_ext())


def view_message(offset: int) -> Command:
    return Command.request(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequest(offset=offset).to_ext())


# --- replication (issue 16) ------------------------------------------------------------------------------------


def role_change(role: str, *, master_addr: str = "", epoch: int = 0, broker_id: int = -1) -> Command:
    """NOTIFY_BROKER_ROLE_CHANGED: ASYNC_MASTER/SYNC_MASTER (promote), SLAVE (follow), FENCED."""
    from pymq.protocol.requests import BrokerRoleChangeRequest

    header = BrokerRoleChangeRequest(role=role, master_addr=master_addr, epoch=epoch, broker_id=broker_id)
    return Command.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.to_ext())


def controller_status() -> Command:
    """CONTROLLER_STATUS (admin -> a nameserver running the failover controller): groups and elections."""
    return Command.request(RequestCode.CONTROLLER_STATUS)


# --- transactional messages ------------------------------------------------------------------------


def end_transaction(
    group: str,
    half_offset: int,
    commit_log_offset: int,
    tx_type: int,
    *,
    msg_id: str,
    from_check: bool = False,
    topic: str | None = None,
) -> Command:
    """END_TRANSACTION (sent oneway): commit or roll back the half message at ``commit_log_offset``;
    ``topic`` is the half message's real topic (a broker with ACL on needs it, with PUB on it)."""
    # build_ext: the header's wire dict without a header object (one per transactional send)
    ext = EndTransactionRequest.build_ext(
        producer_group=group,
        tran_state_table_offset=half_offset,
        commit_log_offset=commit_log_offset,
        commit_or_rollback=tx_type,
        from_transaction_check=from_check,
        msg_id=msg_id,
        transaction_id=msg_id,
        topic=topic,
    )
    return Command(_END_TRANSACTION, 0, 0, None, ext)


def pending_half_messages(group: str | None = None, max_num: int = 1000) -> Command:
    """GET_PENDING_HALF_MESSAGES: a broker's half messages still waiting for an outcome."""
    header = PendingHalfMessagesRequest(producer_group=group, max_num=max_num)
    return Command.request(RequestCode.GET_PENDING_HALF_MESSAGES, header.to_ext())


# --- pop consumption (SimpleConsumer) ----------------------------------------------------------------


def pop_message(
    group: str,
    topic: str,
    expression: str,
    *,
    max_nums: int,
    invisible_ms: int,
    poll_ms: int,
    born_time: int,
    init_mode: int = POP_INIT_MIN,
) -> Command:
    """POP_MESSAGE from any queue of ``topic`` on one broker (the broker chooses)."""
    header = PopMessageRequest(
        consumer_group=group,
        topic=topic,
        max_msg_nums=max_nums,
        invisible_time=invisible_ms,
        poll_time=poll_ms,
        born_time=born_time,
        init_mode=init_mode,
        exp=expression,
    )
    return Command.request(RequestCode.POP_MESSAGE, header.to_ext())


def read_pop_handles(resp: Command) -> list[str]:
    """The receipt handles of a pop answer, one per record of its body, in order."""
    raw = resp.ext.get(PopMessageResponse.WIRE["receipt_handles"]) or ""
    return str(raw).split()


def ack_message(group: str, topic: str, handle: str) -> Command:
    """ACK_MESSAGE of one popped message by its receipt handle."""
    return Command.request(
        RequestCode.ACK_MESSAGE, AckMessageRequest(consumer_group=group, topic=topic, extra_info=handle).to_ext()
    )


def batch_ack(group: str, topic: str, handles: list[str]) -> Command:
    """BATCH_ACK_MESSAGE of popped messages of one topic on one broker (at most MAX_BATCH_ACK)."""
    body = encode_body({"receiptHandles": handles})
    return Command.request(
        RequestCode.BATCH_ACK_MESSAGE, BatchAckRequest(consumer_group=group, topic=topic).to_ext(), body
    )


def read_batch_ack(resp: Command) -> list[tuple[int, str]]:
    """(code, remark) per handle of a batch ack answer, in order."""
    codes, remarks = read_batch_ack_columns(resp)
    return list(zip(codes, remarks, strict=True))


def read_batch_ack_columns(resp: Command, expected: int | None = None) -> tuple[list[int], list[str]]:
    """The codes and the remarks of a batch ack answer, one per handle, in order (``expected`` of
    each if given: ProtocolError otherwise)."""
    body = decode_body(resp.body, "batch ack answer")
    codes, remarks = (body.get("codes"), body.get("remarks")) if isinstance(body, dict) else (None, None)
    if not isinstance(codes, list) or not isinstance(remarks, list) or len(codes) != len(remarks):
        raise RemoteProtocolError("batch ack answer needs codes and remarks: lists of one length")
    if expected is not None and len(codes) != expected:
        raise RemoteProtocolError(f"batch ack answer has {len(codes)} codes for {expected} handles")
    return codes, remarks


def change_invisible_time(group: str, topic: str, handle: str, invisible_ms: int) -> Command:
    """CHANGE_MESSAGE_INVISIBLETIME: invisible for ``invisible_ms`` from now (answers a new handle)."""
    header = ChangeInvisibleTimeRequest(
        consumer_group=group, topic=topic, extra_info=handle, invisible_time=invisible_ms
    )
    return Command.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext())


def read_new_handle(resp: Command) -> str:
    return str(ChangeInvisibleTimeResponse.from_ext(resp.ext).extra_info)
