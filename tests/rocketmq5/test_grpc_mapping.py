"""pymq.grpc_proxy.mapping without sockets: 5.x messages to pymq's and back, handles, routes, status codes."""

from __future__ import annotations

import zlib

import pytest

from pymq.errors import InvalidReceiptHandleError, NoRouteError, SubscriptionGroupNotExistError, TopicNotExistError
from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.mapping import MappingError
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.protocol.message import Prop, iter_messages
from pymq.protocol.record import encode_record
from pymq.protocol.route import PERM_READ, PERM_READ_WRITE, BrokerData, QueueData, TopicRouteData


def v2(**kw: object) -> pb.Message:
    fields: dict[str, object] = {"topic": pb.Resource(name="t"), "body": b"body"}
    return pb.Message(**{**fields, **kw})  # type: ignore[arg-type]


def test_a_5x_message_becomes_a_pymq_message_with_its_tag_keys_properties_and_group() -> None:
    sp = pb.SystemProperties(tag="TagA", keys=["k1", "k2"], message_group="g1", message_type=pb.FIFO)
    out = mapping.to_pymq(v2(user_properties={"color": "red"}, system_properties=sp), 1024)
    m = out.message
    assert (m.topic, m.body, m.tags, m.keys) == ("t", b"body", "TagA", ["k1", "k2"])
    assert m.properties == {"color": "red", mapping.MESSAGE_GROUP_PROP: "g1"}
    assert out.message_group == "g1" and out.message_type == pb.FIFO


def test_a_delivery_timestamp_becomes_pymqs_timer_property() -> None:
    sp = pb.SystemProperties(delivery_timestamp=mapping.timestamp(1_700_000_123_456))
    assert mapping.to_pymq(v2(system_properties=sp), 1024).message.properties[Prop.TIMER_DELIVER_MS] == "1700000123456"


@pytest.mark.parametrize(
    ("msg", "code", "names"),
    [
        (v2(topic=pb.Resource()), pb.ILLEGAL_TOPIC, "topic"),
        (v2(body=b""), pb.MESSAGE_BODY_EMPTY, "body"),
        (v2(body=b"x" * 11), pb.MESSAGE_BODY_TOO_LARGE, "body"),
        (v2(user_properties={"KEYS": "x"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "KEYS"),
        (v2(system_properties=pb.SystemProperties(tag=" ")), pb.ILLEGAL_MESSAGE_TAG, "tag"),
        (v2(system_properties=pb.SystemProperties(keys=["ok", " "])), pb.ILLEGAL_MESSAGE_KEY, "keys"),
        (v2(system_properties=pb.SystemProperties(message_group="")), pb.ILLEGAL_MESSAGE_GROUP, "message_group"),
        (
            v2(system_properties=pb.SystemProperties(message_group="g", delivery_timestamp=mapping.timestamp(1))),
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "delivery_timestamp",
        ),
    ],
)
def test_bad_messages_get_the_code_naming_the_field(msg: pb.Message, code: int, names: str) -> None:
    with pytest.raises(MappingError) as info:
        mapping.to_pymq(msg, 10)
    assert info.value.code == code and names in info.value.message


def test_message_type_against_the_topics_accepted_types() -> None:
    out = mapping.to_pymq(v2(system_properties=pb.SystemProperties(message_type=pb.DELAY)), 1024)
    mapping.check_type(out, mapping.message_types({}))  # no message.type attribute: all accepted
    with pytest.raises(MappingError) as info:
        mapping.check_type(out, mapping.message_types({"message.type": "FIFO"}))
    assert info.value.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and "accepts FIFO" in info.value.message


def test_receipt_handles_round_trip_and_foreign_ones_are_refused() -> None:
    wrapped = mapping.wrap_handle("broker-a", "12 34 5~6")
    assert mapping.unwrap_handle(wrapped) == ("broker-a", "12 34 5~6")
    for bad in ("", "no-separator", "~handle", "!!!~handle", f"{wrapped.split('~')[0]}~"):
        with pytest.raises(MappingError) as info:
            mapping.unwrap_handle(bad)
        assert info.value.code == pb.INVALID_RECEIPT_HANDLE


def test_receipt_handles_carry_the_messages_commit_log_offset() -> None:
    wrapped = mapping.wrap_handle("broker-a", "12 34 5~6", 4096)
    assert mapping.unwrap_handle_offset(wrapped) == ("broker-a", "12 34 5~6", 4096)
    assert mapping.unwrap_handle(wrapped) == ("broker-a", "12 34 5~6")
    assert mapping.unwrap_handle_offset(mapping.wrap_handle("b", "h")) == ("b", "h", None)
    head = wrapped.split(".")[0]
    for bad in (f"{head}.x~h", f"{head}.-1~h", f"{head}.~h"):
        with pytest.raises(MappingError) as info:
            mapping.unwrap_handle_offset(bad)
        assert info.value.code == pb.INVALID_RECEIPT_HANDLE


def test_route_queues_point_at_the_front_end_with_each_queues_permission() -> None:
    route = TopicRouteData(
        queueDatas=[QueueData("broker-a", 2, 3, PERM_READ_WRITE), QueueData("broker-b", 1, 1, PERM_READ)],
        brokerDatas=[BrokerData("c", "broker-a", {0: "10.0.0.1:10911"}), BrokerData("c", "broker-b", {1: "x:1"})],
    )
    me = pb.Endpoints(addresses=[pb.Address(host="proxy", port=8081)])
    queues = mapping.route_queues(pb.Resource(name="t"), route, me, [pb.NORMAL])
    # broker-b has no master: not offered
    assert [(q.broker.name, q.id, q.permission) for q in queues] == [
        ("broker-a", 0, pb.READ_WRITE),
        ("broker-a", 1, pb.READ_WRITE),
        ("broker-a", 2, pb.WRITE),
    ]
    assert all(q.broker.endpoints == me and list(q.accept_message_types) == [pb.NORMAL] for q in queues)


def test_a_stored_message_as_5x_clients_read_it() -> None:
    props = b"UNIQ_KEY\x01ID1\x02TAGS\x01T\x02KEYS\x01a b\x02__SHARDINGKEY\x01g\x02color\x01red\x02"
    record = encode_record(b"t", b"payload", props, born_timestamp=1_700_000_000_000)
    (m,) = list(iter_messages(record, broker_name="broker-a"))
    out = mapping.to_v2(m, "t", "h", 5000)
    sp = out.system_properties
    assert (out.body, sp.message_id, sp.tag, list(sp.keys), sp.message_group) == (
        b"payload",
        "ID1",
        "T",
        ["a", "b"],
        "g",
    )
    assert dict(out.user_properties) == {"color": "red"}
    assert sp.message_type == pb.FIFO and sp.delivery_attempt == 1 and sp.receipt_handle == "h"
    assert sp.body_digest.type == pb.CRC32 and sp.body_digest.checksum == f"{zlib.crc32(b'payload'):08X}"
    assert mapping.millis(sp.invisible_duration) == 5000


def test_errors_map_to_v2_codes_not_internal_error() -> None:
    assert mapping.error_status(TopicNotExistError(17, "t")).code == pb.TOPIC_NOT_FOUND
    assert mapping.error_status(NoRouteError("t")).code == pb.TOPIC_NOT_FOUND
    assert mapping.error_status(SubscriptionGroupNotExistError(26, "g")).code == pb.CONSUMER_GROUP_NOT_FOUND
    assert mapping.error_status(InvalidReceiptHandleError(40013, "expired")).code == pb.INVALID_RECEIPT_HANDLE
    assert mapping.error_status(MappingError(pb.ILLEGAL_TOPIC, "x")).code == pb.ILLEGAL_TOPIC
    assert mapping.error_status(TimeoutError()).code == pb.PROXY_TIMEOUT


def test_transaction_ids_round_trip_and_foreign_ones_are_refused() -> None:
    tx = mapping.transaction_id("broker-a", 7, 123456, "MSGID 1")
    assert mapping.parse_transaction_id(tx) == ("broker-a", 7, 123456, "MSGID 1")
    for bad in ("", "nope", mapping.wrap_handle("broker-a", "x y"), mapping.wrap_handle("broker-a", "1 two id")):
        with pytest.raises(MappingError) as info:
            mapping.parse_transaction_id(bad)
        assert info.value.code == pb.INVALID_TRANSACTION_ID


def test_a_transaction_message_becomes_a_half_message_of_the_front_ends_group() -> None:
    sp = pb.SystemProperties(message_type=pb.TRANSACTION, orphaned_transaction_recovery_duration=mapping.duration(5500))
    out = mapping.to_pymq(v2(system_properties=sp), 1024)
    mapping.mark_transactional(out, sp, "PROXY")
    assert out.message.properties == {"TRAN_MSG": "true", "PGROUP": "PROXY", "CHECK_IMMUNITY_TIME_IN_SECONDS": "5"}
    fifo = pb.SystemProperties(message_type=pb.TRANSACTION, message_group="g")
    with pytest.raises(MappingError) as info:
        mapping.mark_transactional(mapping.to_pymq(v2(system_properties=fifo), 1024), fifo, "PROXY")
    assert info.value.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
