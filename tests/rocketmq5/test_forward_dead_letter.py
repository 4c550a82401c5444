"""ForwardMessageToDeadLetterQueue: as RocketMQ's proxy, the received message is sent back with a
negative delay level (its broker stores it in %DLQ%<group>, properties and origin kept) and its
receipt handle acked; a handle whose message offset was tampered with is refused."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest

from pymq.client import ConsumeFromWhere, Message, MessageQueue, Producer, PullConsumer
from pymq.grpc_proxy import GrpcProxy, mapping
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.pb.service_pb2_grpc import MessagingServiceStub
from pymq.protocol.message import Prop
from pymq.testing import LocalCluster
from pymq.testing.cluster import broker_name

pytestmark = pytest.mark.integration


@pytest.fixture
async def stub(proxied: tuple[LocalCluster, GrpcProxy]) -> AsyncIterator[MessagingServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{proxied[1].port}") as channel:
        yield MessagingServiceStub(channel)


def res(name: str) -> pb.Resource:
    return pb.Resource(name=name)


async def receive(
    stub: MessagingServiceStub, group: str, invisible_s: int, poll_s: int
) -> list[spb.ReceiveMessageResponse]:
    req = spb.ReceiveMessageRequest(
        group=res(group),
        message_queue=pb.MessageQueue(topic=res("t5"), id=0, broker=pb.Broker(name=broker_name(0))),
        batch_size=1,
        invisible_duration={"seconds": invisible_s},
        long_polling_timeout={"seconds": poll_s},
    )
    return [r async for r in stub.ReceiveMessage(req, timeout=poll_s + 5)]


async def forward(stub: MessagingServiceStub, group: str, handle: str, message_id: str) -> pb.Status:
    req = spb.ForwardMessageToDeadLetterQueueRequest(
        group=res(group),
        topic=res("t5"),
        receipt_handle=handle,
        message_id=message_id,
        delivery_attempt=1,
        max_delivery_attempts=16,
    )
    return (await stub.ForwardMessageToDeadLetterQueue(req, timeout=10)).status


async def test_forwarded_message_lands_in_the_dlq_with_its_properties_and_is_not_redelivered(
    proxied: tuple[LocalCluster, GrpcProxy], stub: MessagingServiceStub
) -> None:
    cluster, _ = proxied
    async with Producer(cluster.namesrv_addr) as p:
        sent = await p.send(Message("t5", b"poison", tags="P", keys=["k-1"], properties={"color": "red"}))
    [got] = [r.message for r in await receive(stub, "g-fwd", invisible_s=2, poll_s=5) if r.HasField("message")]
    handle, msg_id = got.system_properties.receipt_handle, got.system_properties.message_id
    assert msg_id == sent.msg_id
    broker, inner, clog = mapping.unwrap_handle_offset(handle)
    assert clog is not None
    # tampered with: another offset, no offset, another message id
    for bad_handle, bad_id in [
        (mapping.wrap_handle(broker, inner, 0 if clog else 1), msg_id),
        (mapping.wrap_handle(broker, inner, clog + 7), msg_id),  # inside the record
        (mapping.wrap_handle(broker, inner, clog + 10**9), msg_id),  # past the end of the log
        (mapping.wrap_handle(broker, inner), msg_id),
        (handle, "0A0000000000000000000000"),
    ]:
        st = await forward(stub, "g-fwd", bad_handle, bad_id)
        assert st.code == pb.INVALID_RECEIPT_HANDLE, st
    st = await forward(stub, "", handle, msg_id)
    assert st.code == pb.ILLEGAL_CONSUMER_GROUP, st

    st = await forward(stub, "g-fwd", handle, msg_id)
    assert st.code == pb.OK, st
    pc = PullConsumer(cluster.namesrv_addr, "dlq-reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue("%DLQ%g-fwd", broker_name(0), 0)])
    async with pc:
        dead = []
        deadline = time.monotonic() + 5
        while not dead and time.monotonic() < deadline:
            dead = await pc.poll(timeout=0.5)
    [m] = dead
    assert (m.body, m.tags, m.keys, m.msg_id) == (b"poison", "P", ["k-1"], sent.msg_id)
    assert m.properties["color"] == "red" and m.properties[Prop.RETRY_TOPIC] == "t5"
    # acked: not redelivered after its 2 s invisible time (the receive polls 4 s)
    again = await receive(stub, "g-fwd", invisible_s=2, poll_s=4)
    assert [r.status.code for r in again if r.HasField("status")] == [pb.MESSAGE_NOT_FOUND], again
