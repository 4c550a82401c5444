"""Bad input at the gRPC front end: each gets the v2 Code that names it, and the front end keeps serving."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest

from pymq.client import Message, Producer
from pymq.client.admin import AdminClient
from pymq.grpc_proxy import GrpcProxy
from pymq.grpc_proxy.handlers import SERVICE
from pymq.grpc_proxy.mapping import wrap_handle
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.pb.service_pb2_grpc import MessagingServiceStub
from pymq.testing import LocalCluster
from pymq.testing.cluster import broker_name

pytestmark = pytest.mark.integration


@pytest.fixture
async def stub(proxied: tuple[LocalCluster, GrpcProxy]) -> AsyncIterator[MessagingServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{proxied[1].port}") as channel:
        yield MessagingServiceStub(channel)


def res(name: str) -> pb.Resource:
    return pb.Resource(name=name)


async def receive(stub: MessagingServiceStub, **fields: object) -> list[spb.ReceiveMessageResponse]:
    req = spb.ReceiveMessageRequest(**fields)  # type: ignore[arg-type]
    return [r async for r in stub.ReceiveMessage(req, timeout=10)]


def queue(topic: str = "t5") -> pb.MessageQueue:
    return pb.MessageQueue(topic=res(topic), id=0, broker=pb.Broker(name=broker_name(0)))


async def test_malformed_protobuf_is_bad_request_and_the_front_end_keeps_serving(
    proxied: tuple[LocalCluster, GrpcProxy], stub: MessagingServiceStub
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{proxied[1].port}") as channel:
        raw = channel.unary_unary(f"/{SERVICE}/QueryRoute")  # bytes in, bytes out
        answer = spb.QueryRouteResponse.FromString(await raw(b"\x0a\xff\xff\xff", timeout=5))
    assert answer.status.code == pb.BAD_REQUEST
    assert "malformed QueryRouteRequest" in answer.status.message
    ok = await stub.QueryRoute(spb.QueryRouteRequest(topic=res("t5")), timeout=5)
    assert ok.status.code == pb.OK and len(ok.message_queues) == 4


async def test_unknown_topic_is_topic_not_found(stub: MessagingServiceStub) -> None:
    answer = await stub.QueryRoute(spb.QueryRouteRequest(topic=res("no-such-topic")), timeout=5)
    assert answer.status.code == pb.TOPIC_NOT_FOUND and "no-such-topic" in answer.status.message
    empty = await stub.QueryRoute(spb.QueryRouteRequest(), timeout=5)
    assert empty.status.code == pb.ILLEGAL_TOPIC


async def test_forged_receipt_handles_are_invalid_receipt_handle(stub: MessagingServiceStub) -> None:
    not_ours = spb.AckMessageEntry(message_id="x", receipt_handle="garbage")
    # names the real broker, whose handle check refuses it
    forged = spb.AckMessageEntry(message_id="y", receipt_handle=wrap_handle(broker_name(0), "0 1 2 3 forged"))
    answer = await stub.AckMessage(
        spb.AckMessageRequest(group=res("g"), topic=res("t5"), entries=[not_ours, forged]), timeout=5
    )
    assert [e.status.code for e in answer.entries] == [pb.INVALID_RECEIPT_HANDLE, pb.INVALID_RECEIPT_HANDLE]
    assert answer.status.code == pb.INVALID_RECEIPT_HANDLE
    change = await stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=res("g"), topic=res("t5"), receipt_handle="garbage", invisible_duration={"seconds": 5}
        ),
        timeout=5,
    )
    assert change.status.code == pb.INVALID_RECEIPT_HANDLE


async def test_receive_arguments_are_checked(stub: MessagingServiceStub) -> None:
    base = {"group": res("g"), "message_queue": queue(), "batch_size": 4}
    bad_batch = await receive(stub, **{**base, "batch_size": 0})
    assert [r.status.code for r in bad_batch] == [pb.BAD_REQUEST] and "batch_size" in bad_batch[0].status.message
    bad_invisible = await receive(stub, **base, invisible_duration={"nanos": 1000})
    assert [r.status.code for r in bad_invisible] == [pb.ILLEGAL_INVISIBLE_TIME]
    no_group = await receive(stub, **{**base, "group": res("")})
    assert [r.status.code for r in no_group] == [pb.ILLEGAL_CONSUMER_GROUP]
    unknown_broker = await receive(stub, **{**base, "message_queue": pb.MessageQueue(topic=res("t5"))})
    assert [r.status.code for r in unknown_broker] == [pb.BAD_REQUEST]
    assert "message_queue.broker.name" in unknown_broker[0].status.message
    sql = await receive(stub, **base, filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    assert [r.status.code for r in sql] == [pb.ILLEGAL_FILTER_EXPRESSION]


async def test_empty_receive_waits_for_the_long_polling_time(
    proxied: tuple[LocalCluster, GrpcProxy], stub: MessagingServiceStub
) -> None:
    """Never an empty answer at once: nothing there, the front end waits the requested 1 s; a message
    arriving meanwhile is answered at once."""
    t0 = time.monotonic()
    empty = await receive(
        stub, group=res("g"), message_queue=queue(), batch_size=4, long_polling_timeout={"seconds": 1}
    )
    assert [r.status.code for r in empty] == [pb.MESSAGE_NOT_FOUND]
    assert time.monotonic() - t0 >= 0.9
    async with Producer(proxied[0].namesrv_addr) as p:
        await p.send(Message("t5", b"x"))
    got = await receive(stub, group=res("g"), message_queue=queue(), batch_size=4, long_polling_timeout={"seconds": 5})
    assert [r.WhichOneof("content") for r in got] == ["delivery_timestamp", "message", "status"]
    assert got[1].message.body == b"x" and got[-1].status.code == pb.OK


async def test_send_errors_name_the_field(stub: MessagingServiceStub) -> None:
    def msg(**kw: object) -> pb.Message:
        fields: dict[str, object] = {"topic": res("t5"), "body": b"b", "system_properties": pb.SystemProperties()}
        return pb.Message(**{**fields, **kw})  # type: ignore[arg-type]

    cases = {
        pb.MESSAGE_BODY_EMPTY: msg(body=b""),
        pb.ILLEGAL_TOPIC: msg(topic=res("")),
        pb.TOPIC_NOT_FOUND: msg(topic=res("no-such-topic")),
        pb.ILLEGAL_MESSAGE_PROPERTY_KEY: msg(user_properties={"UNIQ_KEY": "x"}),
        pb.ILLEGAL_MESSAGE_TAG: msg(system_properties=pb.SystemProperties(tag="a|b")),
    }
    for code, m in cases.items():
        answer = await stub.SendMessage(spb.SendMessageRequest(messages=[m]), timeout=10)
        assert answer.status.code == code, (pb.Code.Name(code), answer)
    none = await stub.SendMessage(spb.SendMessageRequest(), timeout=5)
    assert none.status.code == pb.BAD_REQUEST


async def test_system_property_names_and_unknown_types_are_refused_not_stored(
    proxied: tuple[LocalCluster, GrpcProxy], stub: MessagingServiceStub
) -> None:
    """(fuzz target grpc_mapping) a user property named like a pymq system property (TRAN_MSG would have made
    a NORMAL message a half message, REAL_TOPIC re-routed by the delay/timer paths) is ILLEGAL_MESSAGE_PROPERTY_KEY;
    a message_type the .proto does not name is BAD_REQUEST (it was a gRPC INTERNAL: ValueError); nothing stored."""
    for props in ({"TRAN_MSG": "true"}, {"REAL_TOPIC": "elsewhere", "REAL_QID": "0"}, {"__x": "1"}):
        m = pb.Message(topic=res("t5"), body=b"b", user_properties=props, system_properties=pb.SystemProperties())
        answer = await stub.SendMessage(spb.SendMessageRequest(messages=[m]), timeout=10)
        assert answer.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY, answer
        assert any(repr(k) in answer.status.message for k in props), answer  # (map order: either name)
    sp = pb.SystemProperties(message_type=7)  # type: ignore[arg-type]
    m = pb.Message(topic=res("t5"), body=b"b", system_properties=sp)
    answer = await stub.SendMessage(spb.SendMessageRequest(messages=[m]), timeout=10)
    assert answer.status.code == pb.BAD_REQUEST and "message_type 7" in answer.status.message, answer
    async with AdminClient(proxied[0].namesrv_addr) as admin:
        status = await admin.topic_status("t5")
    assert sum(q["maxOffset"] for q in status) == 0, status


async def test_telemetry_answers_settings_and_refuses_empty_commands(stub: MessagingServiceStub) -> None:
    async def commands() -> AsyncIterator[spb.TelemetryCommand]:
        yield spb.TelemetryCommand(settings=pb.Settings(client_type=pb.SIMPLE_CONSUMER))
        yield spb.TelemetryCommand()

    answers = [a async for a in stub.Telemetry(commands(), timeout=5)]
    assert [a.status.code for a in answers] == [pb.OK, pb.BAD_REQUEST]
    settings = answers[0].settings
    assert settings.subscription.receive_batch_size == 32
    assert settings.subscription.long_polling_timeout.seconds == 2  # the fixture's
    assert settings.backoff_policy.max_attempts == 17


async def test_end_transaction_with_a_forged_id_is_invalid_transaction_id(stub: MessagingServiceStub) -> None:
    req = spb.EndTransactionRequest(topic=res("t5"), transaction_id="forged", resolution=pb.COMMIT)
    assert (await stub.EndTransaction(req, timeout=5)).status.code == pb.INVALID_TRANSACTION_ID
    unknown_broker = wrap_handle("no-such-broker", "1 2 id")
    req = spb.EndTransactionRequest(topic=res("t5"), transaction_id=unknown_broker, resolution=pb.COMMIT)
    answer = await stub.EndTransaction(req, timeout=5)
    assert answer.status.code == pb.INVALID_TRANSACTION_ID and "transaction_id" in answer.status.message
    no_resolution = spb.EndTransactionRequest(topic=res("t5"), transaction_id=unknown_broker)
    assert (await stub.EndTransaction(no_resolution, timeout=5)).status.code == pb.BAD_REQUEST


async def test_unknown_client_types_and_topics_of_receives(stub: MessagingServiceStub) -> None:
    no_type = await stub.Heartbeat(spb.HeartbeatRequest(), timeout=5)
    assert no_type.status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    no_group = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER), timeout=5)
    assert no_group.status.code == pb.ILLEGAL_CONSUMER_GROUP
    ok = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=res("g")), timeout=5)
    assert ok.status.code == pb.OK

    async def settings_of_no_type() -> AsyncIterator[spb.TelemetryCommand]:
        yield spb.TelemetryCommand(settings=pb.Settings())

    answers = [a async for a in stub.Telemetry(settings_of_no_type(), timeout=5)]
    assert [a.status.code for a in answers] == [pb.UNRECOGNIZED_CLIENT_TYPE]
    unknown = await receive(stub, group=res("g"), message_queue=queue("no-such-topic"), batch_size=4)
    assert [r.status.code for r in unknown] == [pb.TOPIC_NOT_FOUND]
