"""pymq.grpc_proxy.clients without sockets: what the front end tells the brokers about 5.x clients, and when."""

from __future__ import annotations

from typing import Any

from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.clients import ClientRegistry, metadata
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.protocol.codes import RequestCode
from pymq.protocol.headers import decode_body
from pymq.protocol.requests import UnregisterClientRequest
from pymq.protocol.route import BrokerData, TopicRouteData


class Rpc:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def invoke_ok(self, addr: str, cmd: Any, timeout: float) -> Any:
        self.sent.append((addr, cmd))


class Routes:
    def route(self, topic: str) -> TopicRouteData:
        return TopicRouteData(brokerDatas=[BrokerData("c", "b0", {0: "m:1", 1: "s:1"})])


class Instance:
    def __init__(self) -> None:
        self.rpc = Rpc()
        self.routes = Routes()
        self.config = type("C", (), {"rpc_timeout_seconds": 3.0})()


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def consumer_settings(group: str) -> pb.Settings:
    return pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[
                pb.SubscriptionEntry(topic=pb.Resource(name="t"), expression=pb.FilterExpression(expression="A||B")),
                pb.SubscriptionEntry(
                    topic=pb.Resource(name="sql"), expression=pb.FilterExpression(type=pb.SQL, expression="a>1")
                ),
            ],
        ),
        user_agent=pb.UA(language=pb.JAVA, version="5.0.7"),
    )


def sent(inst: Instance) -> list[tuple[str, int, Any]]:
    out = []
    for addr, cmd in inst.rpc.sent:
        what = (
            decode_body(cmd.body) if cmd.code == RequestCode.HEART_BEAT else UnregisterClientRequest.from_ext(cmd.ext)
        )
        out.append((addr, cmd.code, what))
    inst.rpc.sent.clear()
    return out


async def test_a_consumer_is_registered_with_every_broker_then_expires_when_silent() -> None:
    inst, clock = Instance(), Clock()
    reg = ClientRegistry(lambda: inst, expiry_s=60, clock=clock)
    await reg.settings("cid-1", {}, consumer_settings("g"))  # no x-mq-language header: the user agent's
    beats = sent(inst)
    assert [(a, c) for a, c, _ in beats] == [("m:1", RequestCode.HEART_BEAT), ("s:1", RequestCode.HEART_BEAT)]
    body = beats[0][2]
    assert body["version"] == 427  # the user agent's 5.0.7 as RocketMQ's MQVersion code (V5_0_7)
    assert (body["clientID"], body["language"], body["protocol"], body["producerDataSet"]) == (
        "cid-1",
        "JAVA",
        "grpc",
        [],
    )
    [c] = body["consumerDataSet"]
    assert (c["groupName"], c["consumeType"], c["messageModel"]) == ("g", "CONSUME_ACTIVELY", "CLUSTERING")
    assert [(s["topic"], s["subString"]) for s in c["subscriptionDataSet"]] == [("t", "A||B")]  # SQL not served
    clock.now += 59
    await reg.heartbeat("cid-1", pb.SIMPLE_CONSUMER, "g")
    assert len(sent(inst)) == 2
    clock.now += 59
    assert await reg.sweep() == []
    clock.now += 2
    assert await reg.sweep() == ["cid-1"]
    gone = sent(inst)
    assert sorted((a, h.client_id, h.consumer_group, h.producer_group) for a, _, h in gone) == [
        ("m:1", "cid-1", "g", None),
        ("s:1", "cid-1", "g", None),
    ]
    assert reg.clients == {}


async def test_a_producer_is_listed_under_its_topics_on_masters_and_leaves_with_its_last_stream() -> None:
    inst = Instance()
    reg = ClientRegistry(lambda: inst)
    settings = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="t1"), pb.Resource(name="t2")])
    )
    await reg.settings("p-1", {"x-mq-language": "python"}, settings)
    [(addr, _, body)] = sent(inst)
    assert addr == "m:1" and body["language"] == "PYTHON"
    assert body["producerDataSet"] == [{"groupName": "t1"}, {"groupName": "t2"}] and body["consumerDataSet"] == []
    reg.stream_opened("p-1")
    reg.stream_opened("p-1")
    await reg.stream_closed("p-1")
    assert sent(inst) == [] and "p-1" in reg.clients  # one stream is still open
    await reg.stream_closed("p-1")
    assert sorted(h.producer_group for _, _, h in sent(inst)) == ["t1", "t2"]
    await reg.heartbeat("p-1", pb.PRODUCER, "")  # not known any more (no settings since): nothing registered
    assert sent(inst) == []


def test_heartbeat_body_language_and_metadata_helpers() -> None:
    assert mapping.client_language("", None) == "OTHER"
    assert mapping.client_language("golang", pb.UA(language=pb.JAVA)) == "GOLANG"

    class Ctx:
        def invocation_metadata(self) -> list[tuple[str, Any]]:
            return [("X-MQ-Client-Id", "abc"), ("x-bin", b"\0")]

    assert metadata(Ctx()) == {"x-mq-client-id": "abc"}
    assert metadata(None) == {}
    body = mapping.heartbeat_body("c", pb.PUSH_CONSUMER, language="JAVA", group="g")
    assert body["consumerDataSet"][0]["consumeType"] == "CONSUME_PASSIVELY"  # type: ignore[index]


async def test_after_close_nothing_is_registered_or_sent() -> None:
    inst = Instance()
    reg = ClientRegistry(lambda: inst)
    settings = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="t1")]))
    await reg.settings("p-1", {}, settings)
    reg.stream_opened("p-1")
    sent(inst)
    await reg.close()
    assert [h.producer_group for _, _, h in sent(inst)] == ["t1"] and reg.clients == {}
    await reg.settings("p-2", {}, settings)
    await reg.stream_closed("p-1")
    await reg.heartbeat("p-2", pb.PRODUCER, "")
    assert sent(inst) == [] and reg.clients == {}


def test_client_versions_as_rocketmq_version_codes() -> None:
    # MQVersion.Version ordinals (apache/rocketmq common/MQVersion.java)
    assert mapping.client_version_code("5.0.0") == 413
    assert mapping.client_version_code("5.1.2") == 437
    assert mapping.client_version_code("5.3.3") == 479
    assert mapping.client_version_code("V5_9_9".replace("_", ".")) == 611
    for unknown in ("", "4.9.4", "5.10.0", "five", "5.1"):
        assert mapping.client_version_code(unknown) == 0
