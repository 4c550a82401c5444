"""pymq.grpc_proxy.topic_types without sockets: one GET_ALL_TOPIC_CONFIG fills the cache for a
broker's topics, re-read after the TTL; unreadable attributes accept every type."""

from __future__ import annotations

from typing import Any

from pymq.errors import RemoteError
from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.topic_types import TopicTypes
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.route import BrokerData, TopicRouteData

EVERY = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]


class Rpc:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.table: dict[str, Any] = {}
        self.fail = False

    async def invoke(self, addr: str, cmd: Command, timeout: float) -> Command:
        self.calls.append((addr, cmd.code))
        if self.fail:
            raise RemoteError(1, "broker down")
        return cmd.response(body=encode_body({"topicConfigTable": self.table}))


class Routes:
    def route(self, topic: str) -> TopicRouteData:
        return TopicRouteData(
            brokerDatas=[BrokerData("c", "b1", {0: "b1:1"}), BrokerData("c", "b0", {0: "b0:1", 1: "b0:2"})]
        )


class Instance:
    def __init__(self) -> None:
        self.rpc = Rpc()
        self.routes = Routes()
        self.config = type("C", (), {"rpc_timeout_seconds": 3.0})()


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_one_read_serves_every_topic_of_the_broker_until_the_ttl() -> None:
    inst, clock = Instance(), Clock()
    inst.rpc.table = {
        "tf": {"attributes": {"message.type": "FIFO"}},
        "tn": {"attributes": {"message.type": "normal"}},
        "plain": {},
    }
    types = TopicTypes(lambda: inst, ttl_s=10, clock=clock)
    assert await types.accepted("tf") == [pb.FIFO]
    assert await types.accepted("tn") == [pb.NORMAL]
    assert await types.accepted("plain") == EVERY
    assert inst.rpc.calls == [("b0:1", RequestCode.GET_ALL_TOPIC_CONFIG)]  # the first master by name, once
    inst.rpc.table["tf"] = {"attributes": {"message.type": "MIXED"}}
    clock.now = 9.9
    assert await types.accepted("tf") == [pb.FIFO]
    clock.now = 10.0
    assert await types.accepted("tf") == EVERY and len(inst.rpc.calls) == 2


async def test_unreadable_attributes_accept_every_type_and_rocketmqs_strict_rule_is_an_option() -> None:
    inst = Instance()
    inst.rpc.fail = True
    assert await TopicTypes(lambda: inst).accepted("tf") == EVERY
    inst.rpc.fail = False
    inst.rpc.table = {"plain": {}}
    assert await TopicTypes(lambda: inst, unset_is_normal=True).accepted("plain") == [pb.NORMAL]
    assert mapping.message_types({"message.type": "MIXED"}, unset_is_normal=True) == EVERY
    assert mapping.message_types({"message.type": "bogus"}, unset_is_normal=True) == EVERY


def test_a_messages_type_comes_from_its_properties_when_undeclared() -> None:
    def out(**sp: Any) -> mapping.Outgoing:
        m = pb.Message(topic=pb.Resource(name="t"), body=b"b", system_properties=pb.SystemProperties(**sp))
        return mapping.to_pymq(m, 1024)

    assert mapping.effective_type(out()) == pb.NORMAL
    assert mapping.effective_type(out(message_group="g")) == pb.FIFO
    assert mapping.effective_type(out(delivery_timestamp=mapping.timestamp(1))) == pb.DELAY
    assert mapping.effective_type(out(message_type=pb.TRANSACTION)) == pb.TRANSACTION
