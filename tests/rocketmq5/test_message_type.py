"""A topic's ``message.type`` attribute (RocketMQ 5): SendMessage of another type is refused with
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, QueryRoute tells the accepted types; a topic without the
attribute (or MIXED) accepts every type.

The 5.x Python client checks a message's type against its route's accepted types before it
sends, so with it the front end's QueryRoute answer is what refuses; direct SendMessage calls
prove the front end's own check (clients that do not check, or a stale route)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from pymq.grpc_proxy import GrpcProxy
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.pb.service_pb2_grpc import MessagingServiceStub
from pymq.testing import LocalCluster
from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


@pytest.fixture
async def typed(proxied: tuple[LocalCluster, GrpcProxy]) -> AsyncIterator[tuple[LocalCluster, GrpcProxy]]:
    cluster, proxy = proxied
    for topic, kind in (("t-fifo", "FIFO"), ("t-normal", "NORMAL"), ("t-mixed", "MIXED")):
        await cluster.create_topic(topic, 2, attributes={"message.type": kind})
    yield cluster, proxy


async def test_5x_producer_is_refused_a_type_its_topic_does_not_accept(
    typed: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    _, proxy = typed
    endpoint = f"127.0.0.1:{proxy.port}"
    fifo = await run_client(
        rocketmq5_python,
        "produce.py",
        {"endpoint": endpoint, "topic": "t-fifo", "messages": [{"body": "plain"}, {"body": "grouped", "group": "g1"}]},
    )
    assert "message_type:NORMAL, queue access type:FIFO" in fifo[0]["error"], fifo
    assert "message_id" in fifo[1], fifo
    normal = await run_client(
        rocketmq5_python,
        "produce.py",
        {"endpoint": endpoint, "topic": "t-normal", "messages": [{"body": "later", "delay_s": 5}, {"body": "now"}]},
    )
    assert "message_type:DELAY, queue access type:NORMAL" in normal[0]["error"], normal
    assert "message_id" in normal[1], normal
    for topic in ("t-mixed", "t5"):  # MIXED, and no attribute: every type
        out = await run_client(
            rocketmq5_python,
            "produce.py",
            {
                "endpoint": endpoint,
                "topic": topic,
                "messages": [{"body": "a"}, {"body": "b", "group": "g1"}, {"body": "c", "delay_s": 5}],
            },
        )
        assert all("message_id" in r for r in out), (topic, out)


async def test_query_route_tells_the_accepted_types(typed: tuple[LocalCluster, GrpcProxy]) -> None:
    _, proxy = typed
    async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
        stub = MessagingServiceStub(channel)
        accepted = {}
        for topic in ("t-fifo", "t-normal", "t-mixed", "t5"):
            answer = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=5)
            assert answer.status.code == pb.OK, answer.status
            accepted[topic] = {tuple(q.accept_message_types) for q in answer.message_queues}
    every = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
    assert accepted == {"t-fifo": {(pb.FIFO,)}, "t-normal": {(pb.NORMAL,)}, "t-mixed": {every}, "t5": {every}}


async def test_send_message_of_another_type_is_message_property_conflict_with_type(
    typed: tuple[LocalCluster, GrpcProxy],
) -> None:
    _, proxy = typed

    def msg(topic: str, **sp: object) -> pb.Message:
        return pb.Message(
            topic=pb.Resource(name=topic),
            body=b"x",
            system_properties=pb.SystemProperties(message_id="0A00000000000000000000AB", **sp),  # type: ignore[arg-type]
        )

    async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
        stub = MessagingServiceStub(channel)

        async def send(m: pb.Message) -> pb.Status:
            answer = await stub.SendMessage(spb.SendMessageRequest(messages=[m]), timeout=5)
            return answer.entries[0].status

        refused = await send(msg("t-fifo", message_type=pb.NORMAL))
        assert refused.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, refused
        assert refused.message == "topic t-fifo accepts FIFO messages (its message.type attribute), not NORMAL"
        # no declared type: taken from the properties, as RocketMQ does (a message group is FIFO)
        undeclared = await send(msg("t-normal", message_group="g1"))
        assert undeclared.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and "not FIFO" in undeclared.message
        assert (await send(msg("t-fifo", message_type=pb.FIFO, message_group="g1"))).code == pb.OK
        assert (await send(msg("t-mixed", message_type=pb.FIFO, message_group="g1"))).code == pb.OK
        assert (await send(msg("t5", message_type=pb.FIFO, message_group="g1"))).code == pb.OK
