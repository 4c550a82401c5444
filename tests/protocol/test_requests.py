"""Typed request/response headers: wire names, round trips, string coercion and clear errors."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from types import ModuleType
from typing import Any

import pytest

from pymq import protocol
from pymq.errors import InvalidRequestError
from pymq.protocol import requests as rq
from pymq.protocol.route import MessageQueue

#: one fully populated instance of every header class, and the wire names it must use
#: (today's names: what the client sends and the handlers read)
CASES: list[tuple[rq.Header, dict[str, Any]]] = [
    (
        rq.SendMessageRequest(topic="t", queue_id=3, producer_group="pg"),
        {"topic": "t", "queueId": 3, "producerGroup": "pg"},
    ),
    (
        rq.SendMessageResponse(queue_id=1, queue_offset=7, commit_log_offsets=[10, 20], statuses=[0, 6]),
        {"queueId": 1, "queueOffset": 7, "commitLogOffsets": [10, 20], "statuses": [0, 6]},
    ),
    (
        rq.PullMessageRequest(
            consumer_group="g",
            topic="t",
            queue_id=2,
            queue_offset=5,
            max_msg_nums=16,
            max_msg_bytes=1024,
            sys_flag=rq.FLAG_SUBSCRIPTION | rq.FLAG_SUSPEND,
            commit_offset=4,
            suspend_timeout_millis=1500,
            subscription="a || b",
            sub_version=9,
        ),
        {
            "consumerGroup": "g",
            "topic": "t",
            "queueId": 2,
            "queueOffset": 5,
            "maxMsgNums": 16,
            "maxMsgBytes": 1024,
            "sysFlag": 6,
            "commitOffset": 4,
            "suspendTimeoutMillis": 1500,
            "subscription": "a || b",
            "subVersion": 9,
        },
    ),
    (
        rq.PullMessageResponse(next_begin_offset=9, min_offset=1, max_offset=12, suggest_which_broker_id=0),
        {"nextBeginOffset": 9, "minOffset": 1, "maxOffset": 12, "suggestWhichBrokerId": 0},
    ),
    (
        rq.ConsumerSendMsgBackRequest(
            offset=100,
            group="g",
            delay_level=2,
            origin_msg_id="ID",
            origin_topic="t",
            max_reconsume_times=5,
        ),
        {
            "offset": 100,
            "group": "g",
            "delayLevel": 2,
            "originMsgId": "ID",
            "originTopic": "t",
            "maxReconsumeTimes": 5,
        },
    ),
    (
        rq.QueryConsumerOffsetRequest(consumer_group="g", topic="t", queue_id=1),
        {"consumerGroup": "g", "topic": "t", "queueId": 1},
    ),
    (
        rq.UpdateConsumerOffsetRequest(consumer_group="g", topic="t", queue_id=1, commit_offset=42),
        {"consumerGroup": "g", "topic": "t", "queueId": 1, "commitOffset": 42},
    ),
    (rq.QueueOffsetRequest(topic="t", queue_id=0), {"topic": "t", "queueId": 0}),
    (
        rq.SearchOffsetRequest(topic="t", queue_id=0, timestamp=1700000000000),
        {"topic": "t", "queueId": 0, "timestamp": 1700000000000},
    ),
    (rq.OffsetResponse(offset=8), {"offset": 8}),
    (rq.StoreTimeResponse(timestamp=123), {"timestamp": 123}),
    (rq.ConsumeStatsRequest(consumer_group="g", topic="t"), {"consumerGroup": "g", "topic": "t"}),
    (
        rq.ResetOffsetRequest(group="g", topic="t", timestamp=-2),
        {"group": "g", "topic": "t", "timestamp": -2},
    ),
    (
        rq.UnregisterClientRequest(client_id="c", producer_group="pg", consumer_group="cg"),
        {"clientID": "c", "producerGroup": "pg", "consumerGroup": "cg"},
    ),
    (rq.ConsumerGroupRequest(consumer_group="g"), {"consumerGroup": "g"}),
    (
        rq.ConsumerRunningInfoRequest(consumer_group="g", client_id="10.0.0.1@7", jstack_enable=True),
        {"consumerGroup": "g", "clientId": "10.0.0.1@7", "jstackEnable": True},
    ),
    (
        rq.QueryMessageRequest(topic="t", key="k", max_num=5, begin_timestamp=1, end_timestamp=2),
        {"topic": "t", "key": "k", "maxNum": 5, "beginTimestamp": 1, "endTimestamp": 2},
    ),
    (rq.ViewMessageRequest(offset=77), {"offset": 77}),
    (
        rq.CreateTopicRequest(
            topic="t",
            read_queue_nums=4,
            write_queue_nums=2,
            perm=4,
            topic_filter_type="MULTI_TAG",
            topic_sys_flag=1,
            order=True,
        ),
        {
            "topic": "t",
            "readQueueNums": 4,
            "writeQueueNums": 2,
            "perm": 4,
            "topicFilterType": "MULTI_TAG",
            "topicSysFlag": 1,
            "order": True,
        },
    ),
    (rq.TopicRequest(topic="t"), {"topic": "t"}),
    (rq.DeleteSubscriptionGroupRequest(group_name="g"), {"groupName": "g"}),
    (
        rq.RegisterBrokerRequest(
            broker_addr="h:1", broker_name="b", cluster_name="c", broker_id=0, ha_server_addr="h:1"
        ),
        {"brokerAddr": "h:1", "brokerName": "b", "clusterName": "c", "brokerId": 0, "haServerAddr": "h:1"},
    ),
    (
        rq.RegisterBrokerResponse(master_addr="h:1", ha_server_addr="h:2"),
        {"masterAddr": "h:1", "haServerAddr": "h:2"},
    ),
    (
        rq.UnregisterBrokerRequest(broker_addr="h:1", broker_name="b", cluster_name="c", broker_id=1),
        {"brokerAddr": "h:1", "brokerName": "b", "clusterName": "c", "brokerId": 1},
    ),
    (
        rq.BrokerRoleChangeRequest(role="SLAVE", master_addr="h:2", epoch=3, broker_id=1),
        {"role": "SLAVE", "masterAddr": "h:2", "epoch": 3, "brokerId": 1},
    ),
    # transactional messages: RocketMQ's EndTransactionRequestHeader / CheckTransactionStateRequestHeader names
    (
        rq.EndTransactionRequest(
            producer_group="g",
            tran_state_table_offset=3,
            commit_log_offset=400,
            commit_or_rollback=8,
            from_transaction_check=True,
            msg_id="m",
            transaction_id="m",
            topic="orders",
        ),
        {
            "producerGroup": "g",
            "tranStateTableOffset": 3,
            "commitLogOffset": 400,
            "commitOrRollback": 8,
            "fromTransactionCheck": True,
            "topic": "orders",
            "msgId": "m",
            "transactionId": "m",
        },
    ),
    (
        rq.CheckTransactionStateRequest(
            topic="t",
            tran_state_table_offset=3,
            commit_log_offset=400,
            msg_id="m",
            transaction_id="m",
            offset_msg_id="o",
        ),
        {
            "topic": "t",
            "tranStateTableOffset": 3,
            "commitLogOffset": 400,
            "msgId": "m",
            "transactionId": "m",
            "offsetMsgId": "o",
        },
    ),
    (rq.PendingHalfMessagesRequest(producer_group="g", max_num=5), {"producerGroup": "g", "maxNum": 5}),
    (
        rq.PopMessageRequest(consumer_group="g", topic="t", invisible_time=30_000, poll_time=5000, exp="a || b"),
        {
            "consumerGroup": "g",
            "topic": "t",
            "queueId": -1,
            "maxMsgNums": 32,
            "invisibleTime": 30_000,
            "pollTime": 5000,
            "bornTime": 0,
            "initMode": 0,
            "exp": "a || b",
        },
    ),
    (
        rq.PopMessageResponse(pop_time=1, invisible_time=2, receipt_handles="a b"),
        {"popTime": 1, "invisibleTime": 2, "receiptHandles": "a b"},
    ),
    (
        rq.AckMessageRequest(consumer_group="g", topic="t", extra_info="h"),
        {"consumerGroup": "g", "topic": "t", "extraInfo": "h"},
    ),
    (
        rq.ChangeInvisibleTimeRequest(consumer_group="g", topic="t", extra_info="h", invisible_time=1000),
        {"consumerGroup": "g", "topic": "t", "extraInfo": "h", "invisibleTime": 1000},
    ),
    (
        rq.ChangeInvisibleTimeResponse(pop_time=1, invisible_time=2, extra_info="h"),
        {"popTime": 1, "invisibleTime": 2, "extraInfo": "h"},
    ),
    (rq.BatchAckRequest(consumer_group="g", topic="t"), {"consumerGroup": "g", "topic": "t"}),
    (rq.QueryQueueOffsetsRequest(consumer_group="g", timestamp=5), {"consumerGroup": "g", "timestamp": 5}),
    (
        rq.WaitQueueArrivalRequest(consumer_group="g", suspend_timeout_millis=15000),
        {"consumerGroup": "g", "suspendTimeoutMillis": 15000},
    ),
    (
        rq.ControllerHeartbeatRequest(
            cluster_name="c", broker_name="b", broker_addr="h:1", role="MASTER", epoch=2, max_offset=9,
            priority=1, starting=True,
        ),
        {"clusterName": "c", "brokerName": "b", "brokerAddr": "h:1", "role": "MASTER", "epoch": 2, "maxOffset": 9,
         "priority": 1, "starting": True},
    ),
    (
        rq.ControllerAssignment(role="MASTER", master_addr="h:1", epoch=3, broker_id=0, lease_ms=2000,
                                sync_state_set="h:2,h:3"),
        {"role": "MASTER", "masterAddr": "h:1", "epoch": 3, "brokerId": 0, "leaseMs": 2000,
         "syncStateSet": "h:2,h:3"},
    ),
    (
        rq.ControllerElectRequest(broker_name="b", broker_addr="h:2"),
        {"brokerName": "b", "brokerAddr": "h:2"},
    ),
    (
        rq.ConsumeMessageDirectlyRequest(consumer_group="g", client_id="c@1", msg_id="AB", broker_name="b", topic="t"),
        {"consumerGroup": "g", "clientId": "c@1", "msgId": "AB", "brokerName": "b", "topic": "t"},
    ),
]  # fmt: skip

IDS = [type(h).__name__ for h, _ in CASES]


def _header_classes_of(module: ModuleType) -> set[type[rq.Header]]:
    return {
        c
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, rq.Header) and c is not rq.Header and c.__module__ == module.__name__
    }


def test_every_header_class_is_covered() -> None:
    """Every header class of every protocol module (requests and its split-off siblings) has a case."""
    modules = [importlib.import_module(m.name) for m in pkgutil.iter_modules(protocol.__path__, "pymq.protocol.")]
    classes = set().union(*(_header_classes_of(m) for m in modules))
    assert classes == {type(h) for h, _ in CASES}
    assert {"requests_pop", "requests_transaction", "requests_replication", "requests_many"} <= {
        m.__name__.rsplit(".", 1)[1] for m in modules if _header_classes_of(m)
    }


def test_every_header_class_is_importable_from_requests() -> None:
    """The split keeps one public import path: ``from pymq.protocol.requests import <any header>``."""
    for header, _ in CASES:
        assert getattr(rq, type(header).__name__) is type(header)


@pytest.mark.parametrize(("header", "wire"), CASES, ids=IDS)
def test_to_ext_uses_todays_wire_names(header: rq.Header, wire: dict[str, Any]) -> None:
    assert header.to_ext() == wire


@pytest.mark.parametrize(("header", "wire"), CASES, ids=IDS)
def test_build_ext_is_to_ext_without_the_object(header: rq.Header, wire: dict[str, Any]) -> None:
    fields = {f.name: getattr(header, f.name) for f in dataclasses.fields(header)}  # type: ignore[arg-type]
    assert type(header).build_ext(**fields) == wire


def test_build_ext_defaults() -> None:
    assert rq.SendMessageResponse.build_ext(queue_id=1, queue_offset=2) == {
        "queueId": 1,
        "queueOffset": 2,
        "commitLogOffsets": [],
    }
    assert rq.PullMessageResponse.build_ext(next_begin_offset=4)["suggestWhichBrokerId"] == 0
    with pytest.raises(TypeError):
        rq.OffsetResponse.build_ext()


@pytest.mark.parametrize(("header", "wire"), CASES, ids=IDS)
def test_round_trip(header: rq.Header, wire: dict[str, Any]) -> None:
    assert type(header).from_ext(header.to_ext()) == header


@pytest.mark.parametrize(("header", "wire"), CASES, ids=IDS)
def test_string_typed_values_are_coerced(header: rq.Header, wire: dict[str, Any]) -> None:
    """RocketMQ sends every header value as a string."""
    as_strings = {
        k: v if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v) for k, v in wire.items()
    }
    assert type(header).from_ext(as_strings) == header


@pytest.mark.parametrize(("header", "wire"), CASES, ids=IDS)
def test_missing_required_field_is_named(header: rq.Header, wire: dict[str, Any]) -> None:
    cls = type(header)
    required = [cls.WIRE[f.name] for f in dataclasses.fields(header) if _required(f)]  # type: ignore[arg-type]
    for name in required:
        partial = {k: v for k, v in wire.items() if k != name}
        with pytest.raises(InvalidRequestError, match=repr(name)):
            cls.from_ext(partial)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def test_ill_typed_field_is_named() -> None:
    with pytest.raises(InvalidRequestError, match="'queueId' must be an integer"):
        rq.SendMessageRequest.from_ext({"topic": "t", "queueId": "x"})
    with pytest.raises(InvalidRequestError, match="'topic' must be a string"):
        rq.SendMessageRequest.from_ext({"topic": 5})
    with pytest.raises(InvalidRequestError, match="'order' must be a boolean"):
        rq.CreateTopicRequest.from_ext({"topic": "t", "order": "maybe"})
    with pytest.raises(InvalidRequestError, match="'commitLogOffsets' must be a list"):
        rq.SendMessageResponse.from_ext({"queueId": 0, "queueOffset": 0, "commitLogOffsets": 3})


def test_defaults_apply_when_absent_or_none() -> None:
    r = rq.PullMessageRequest.from_ext(
        {"consumerGroup": "g", "topic": "t", "queueId": 0, "queueOffset": 0, "subscription": None}
    )
    assert (r.max_msg_nums, r.max_msg_bytes, r.sys_flag, r.commit_offset, r.suspend_timeout_millis) == (
        32,
        rq.DEFAULT_PULL_MAX_BYTES,
        0,
        -1,
        0,
    )
    assert r.subscription is None
    assert rq.SendMessageRequest.from_ext({"topic": "t"}).queue_id == -1
    c = rq.CreateTopicRequest.from_ext({"topic": "t"})
    assert c.read_queue_nums is None and c.write_queue_nums is None and c.order is False


def test_optional_none_fields_are_left_out() -> None:
    assert rq.UnregisterClientRequest(client_id="c").to_ext() == {"clientID": "c"}
    assert rq.ConsumeStatsRequest(consumer_group="g").to_ext() == {"consumerGroup": "g"}
    assert "statuses" not in rq.SendMessageResponse(queue_id=0, queue_offset=0).to_ext()


def test_bytes_values_decode_as_strings() -> None:
    assert rq.TopicRequest.from_ext({"topic": b"t"}).topic == "t"


def test_non_integer_numbers_are_refused_not_truncated() -> None:
    for bad in (1.5, "1.5", "1e3", "0x10", "1_0", " 1", float("nan"), float("inf"), "", "+"):
        with pytest.raises(InvalidRequestError, match="'queueId' must be an integer"):
            rq.SendMessageRequest.from_ext({"topic": "t", "queueId": bad})
    for good, value in ((2.0, 2), ("-1", -1), ("+3", 3), (b"4", 4)):
        assert rq.SendMessageRequest.from_ext({"topic": "t", "queueId": good}).queue_id == value


PULL = {"consumerGroup": "g", "topic": "t", "queueId": 0, "queueOffset": 0}


@pytest.mark.parametrize(
    ("field", "bad", "good"),
    [
        ("maxMsgNums", [0, -1, 1025, 2**31], [1, 1024, "1024"]),
        ("queueId", [-1, 2**31], [0, 2**31 - 1]),
        ("maxMsgBytes", [0, 2**31], [1, 2**31 - 1]),
        ("sysFlag", [-1], [0, 7]),
        ("queueOffset", [2**63, -(2**63) - 1, str(2**64)], [2**63 - 1, -1]),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(field: str, bad: list[Any], good: list[Any]) -> None:
    """Refused, never clamped: RocketMQ's clients refuse a pullBatchSize outside 1..1024, so do we."""
    for value in bad:
        with pytest.raises(InvalidRequestError, match=f"'{field}' must be"):
            rq.PullMessageRequest.from_ext({**PULL, field: value})
    for value in good:
        rq.PullMessageRequest.from_ext({**PULL, field: value})


def test_every_int_field_is_range_checked() -> None:
    """Every integer field of every header refuses what does not fit in int64 (msgpack carries up to 2**64 - 1)."""
    for header, wire in CASES:
        cls = type(header)
        for f in dataclasses.fields(header):  # type: ignore[arg-type]
            if str(f.type).startswith("int"):
                with pytest.raises(InvalidRequestError, match=repr(cls.WIRE[f.name])):
                    cls.from_ext({**wire, cls.WIRE[f.name]: 2**64 - 1})


def test_bounds_must_hold_the_default() -> None:
    with pytest.raises(TypeError, match="outside"):

        @rq.wire_header
        @dataclasses.dataclass(slots=True, kw_only=True)
        class Bad(rq.Header):
            n: int = rq.bounded(0, lo=1, hi=2)


def test_bool_is_not_taken_for_an_int() -> None:
    assert rq.SendMessageRequest.from_ext({"topic": "t", "queueId": True}).queue_id == 1


def test_lock_body_round_trip_and_errors() -> None:
    body = rq.LockBatchBody("g", "c", [MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)])
    assert rq.LockBatchBody.from_body(body.to_body()) == body
    assert set(body.to_body()) == {"consumerGroup", "clientId", "mqSet"}
    with pytest.raises(InvalidRequestError, match="must be a map"):
        rq.LockBatchBody.from_body([1])
    with pytest.raises(InvalidRequestError, match="clientId"):
        rq.LockBatchBody.from_body({"consumerGroup": "g", "mqSet": []})


def test_shared_names_and_flags() -> None:
    assert rq.retry_topic("g") == "%RETRY%g" and rq.dlq_topic("g") == "%DLQ%g"
    assert rq.AUTO_CREATE_TOPIC == "TBW102"
    assert (rq.FLAG_COMMIT_OFFSET, rq.FLAG_SUSPEND, rq.FLAG_SUBSCRIPTION) == (1, 2, 4)


def test_headers_have_slots() -> None:
    h = rq.QueueOffsetRequest(topic="t", queue_id=0)
    with pytest.raises(AttributeError):
        h.other = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("rows", "with_offset", "match"),
    [
        ([["t", 1]], True, "each queue is"),
        ([["t", -1]], False, "each queue is"),
        ([["t", True]], False, "each queue is"),
        ([[1, 1]], False, "each queue is"),
        ([["t", 0]] * (rq.MAX_QUEUES_PER_REQUEST + 1), False, "at most"),
    ],
)
def test_many_queue_bodies_are_checked(rows: list[Any], with_offset: bool, match: str) -> None:
    from pymq.protocol.headers import encode_body
    from pymq.protocol.requests_many import queues_body, read_queues

    with pytest.raises(InvalidRequestError, match=match):
        read_queues(encode_body({"queues": rows}), with_offset=with_offset)
    with pytest.raises(InvalidRequestError, match="'queues' list"):
        read_queues(encode_body({"q": []}), with_offset=False)
    assert read_queues(queues_body([("t", 2, 7)]), with_offset=True) == [("t", 2, 7)]
    assert read_queues(queues_body([("t", 2)]), with_offset=False) == [("t", 2, 0)]
