"""A 4.x consumer's requests on a broker's port, as frames built from RocketMQ 4.9's formats.

PULL_MESSAGE (with and without the subscription bit, tag filtering, long polling, the pull
codes), the offset codes, LOCK/UNLOCK_BATCH_MQ, NOTIFY_CONSUMER_IDS_CHANGED pushed to a
remoting client, and bad input answered with a remark naming the field. Messages are produced
with pymq's own SDK; the pull body must parse as MessageDecoder records.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator

import pytest

from pymq.client import Producer
from pymq.protocol.message import Message
from pymq.remoting.codes import FLAG_ONEWAY, LanguageCode, RequestCode, ResponseCode, SerializeType
from pymq.remoting.command import RemotingCommand, RemotingDecoder, encode
from pymq.remoting.message_layout import decode_messages
from pymq.tasks import wait_within
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration

GROUP = "CG_R30"


class Remoting:
    """One remoting connection: requests answered by opaque, pushed requests collected."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stype: SerializeType) -> None:
        self.reader, self.writer, self.stype = reader, writer, stype
        self.waiting: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.pushed: list[RemotingCommand] = []
        self.opaques = itertools.count(1)
        self.task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, address: str, stype: SerializeType = SerializeType.JSON) -> Remoting:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, stype)

    async def _read(self) -> None:
        dec = RemotingDecoder()
        while data := await self.reader.read(65536):
            for cmd in dec.feed(data):
                if cmd.is_response:
                    fut = self.waiting.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                else:
                    self.pushed.append(cmd)

    def send(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", oneway: bool = False) -> int:
        opaque = next(self.opaques)
        cmd = RemotingCommand(
            code=code,
            language=LanguageCode.CPP,
            version=63,
            opaque=opaque,
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=ext,
            body=body,
            serialize_type=self.stype,
        )
        self.writer.write(encode(cmd))
        return opaque

    async def ask(
        self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", timeout: float = 10
    ) -> RemotingCommand:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.waiting[self.send(code, ext, body)] = fut
        return await wait_within(fut, timeout)

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()


def heartbeat_body(client_id: str, topic: str, expression: str) -> bytes:
    """HeartbeatData as the C++ client writes it (enum ordinals, not names; codeSet zeros; subVersion a string)."""
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": GROUP,
                    "consumeType": 1,
                    "messageModel": 1,
                    "consumeFromWhere": 0,
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": topic,
                            "subString": expression,
                            "classFilterMode": False,
                            "tagsSet": [t.strip() for t in expression.split("||")] if expression != "*" else [],
                            # the C++ client (1.x) sends a 0 per tag here, not the tags' hash codes
                            "codeSet": [0] * len(expression.split("||")) if expression != "*" else [],
                            "subVersion": "1",
                        }
                    ],
                }
            ],
            "producerDataSet": [],
        }
    ).encode()


def pull_ext(topic: str, offset: int, sys_flag: int = 0, **more: str) -> dict[str, str]:
    ext = {
        "consumerGroup": GROUP,
        "topic": topic,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "1",
    }
    ext.update(more)
    return ext


@pytest.fixture
async def topic(cluster: LocalCluster) -> AsyncIterator[str]:
    await cluster.create_topic("RC", queues=1)
    await cluster.wait_for_route("RC", 1)
    yield "RC"


async def produce(cluster: LocalCluster, topic: str, items: list[tuple[str, bytes]]) -> None:
    async with Producer(cluster.namesrv_addr) as producer:
        for tag, body in items:
            msg = Message(topic, body, tags=tag, keys=[f"key-{tag}"])
            msg.properties["color"] = "blue"
            await producer.send(msg)


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
async def test_pull_filters_by_the_heartbeat_subscription_and_returns_message_decoder_records(
    cluster: LocalCluster, topic: str, stype: SerializeType
) -> None:
    bodies = [bytes(range(1, 256)), "héllo".encode(), b"x" * 3000]
    await produce(cluster, topic, [("TagA", bodies[0]), ("TagB", bodies[1]), ("TagA", bodies[2])])
    rc = await Remoting.open(cluster.brokers[0].address, stype)
    try:
        hb = await rc.ask(RequestCode.HEART_BEAT, body=heartbeat_body("c1@1", topic, "TagA"))
        assert hb.code == ResponseCode.SUCCESS, hb.remark
        # no subscription bit (0x4): the broker filters by the heartbeat's "TagA"
        resp = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 0, sys_flag=0x2))
        assert (resp.code, resp.serialize_type) == (ResponseCode.SUCCESS, stype), resp.remark
        ext = resp.ext_fields or {}
        assert ext["nextBeginOffset"] == "3" and ext["minOffset"] == "0" and ext["maxOffset"] == "3"
        assert ext["suggestWhichBrokerId"] == "0"
        msgs = decode_messages(resp.body)
        assert [m.body for m in msgs] == [bodies[0], bodies[2]]
        assert [m.queue_offset for m in msgs] == [0, 2]
        for m in msgs:
            assert m.topic == topic and m.reconsume_times == 0
            assert m.properties["TAGS"] == "TagA" and m.properties["KEYS"] == "key-TagA"
            assert m.properties["color"] == "blue" and m.properties["UNIQ_KEY"]
            assert m.store_host == ("127.0.0.1", int(cluster.brokers[0].address.rpartition(":")[2]))
        # with the subscription bit the request's own expression wins
        resp = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 0, sys_flag=0x4, subscription="TagB"))
        assert resp.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(resp.body)] == [bodies[1]]
        resp = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 0, sys_flag=0x4, subscription="*"))
        assert [m.body for m in decode_messages(resp.body)] == bodies
    finally:
        await rc.close()


async def test_pull_codes_and_long_polling(cluster: LocalCluster, topic: str) -> None:
    await produce(cluster, topic, [("TagA", b"one")])
    rc = await Remoting.open(cluster.brokers[0].address)
    try:
        await rc.ask(RequestCode.HEART_BEAT, body=heartbeat_body("c1@1", topic, "*"))
        at_end = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 1))
        assert at_end.code == ResponseCode.PULL_NOT_FOUND and (at_end.ext_fields or {})["nextBeginOffset"] == "1"
        assert at_end.body == b""
        moved = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 50))
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED and (moved.ext_fields or {})["maxOffset"] == "1"
        filtered = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 0, sys_flag=0x4, subscription="Nope"))
        assert filtered.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert (filtered.ext_fields or {})["nextBeginOffset"] == "1"
        # held (suspend bit) until its time runs out
        t0 = time.monotonic()
        held = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 1, sys_flag=0x2, suspendTimeoutMillis="400"))
        assert held.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - t0 >= 0.35
        # held, and answered by the message that arrives meanwhile
        t0 = time.monotonic()
        pending = asyncio.ensure_future(
            rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 1, sys_flag=0x2, suspendTimeoutMillis="15000"))
        )
        await asyncio.sleep(0.3)
        assert not pending.done()
        await produce(cluster, topic, [("TagA", b"two")])
        woke = await pending
        assert woke.code == ResponseCode.SUCCESS and time.monotonic() - t0 < 10
        assert [m.body for m in decode_messages(woke.body)] == [b"two"]
        # the commit-offset bit commits the offset the pull carries
        await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 2, sys_flag=0x1, commitOffset="2"))
        q = await rc.ask(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": topic, "queueId": "0"})
        assert q.code == ResponseCode.SUCCESS and (q.ext_fields or {})["offset"] == "2"
    finally:
        await rc.close()


async def test_pull_without_subscription_bit_and_no_heartbeat_is_subscription_not_exist(
    cluster: LocalCluster, topic: str
) -> None:
    rc = await Remoting.open(cluster.brokers[0].address)
    try:
        resp = await rc.ask(RequestCode.PULL_MESSAGE, pull_ext(topic, 0))
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST and GROUP in (resp.remark or "")
    finally:
        await rc.close()


async def test_offset_codes(cluster: LocalCluster, topic: str) -> None:
    t_before = int(time.time() * 1000) - 1
    await produce(cluster, topic, [("a", b"1"), ("a", b"2"), ("a", b"3")])
    rc = await Remoting.open(cluster.brokers[0].address, SerializeType.ROCKETMQ)
    q = {"consumerGroup": GROUP, "topic": topic, "queueId": "0"}
    try:
        none = await rc.ask(RequestCode.QUERY_CONSUMER_OFFSET, q)
        assert none.code == ResponseCode.QUERY_NOT_FOUND
        rc.send(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "2"}, oneway=True)
        deadline = time.monotonic() + 5
        while (got := await rc.ask(RequestCode.QUERY_CONSUMER_OFFSET, q)).code != ResponseCode.SUCCESS:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert (got.ext_fields or {})["offset"] == "2"
        updated = await rc.ask(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "3"})
        assert updated.code == ResponseCode.SUCCESS
        assert ((await rc.ask(RequestCode.QUERY_CONSUMER_OFFSET, q)).ext_fields or {})["offset"] == "3"
        queue = {"topic": topic, "queueId": "0"}
        assert ((await rc.ask(RequestCode.GET_MAX_OFFSET, queue)).ext_fields or {})["offset"] == "3"
        assert ((await rc.ask(RequestCode.GET_MIN_OFFSET, queue)).ext_fields or {})["offset"] == "0"
        earliest = await rc.ask(RequestCode.GET_EARLIEST_MSG_STORETIME, queue)
        assert earliest.code == ResponseCode.SUCCESS
        assert int((earliest.ext_fields or {})["timestamp"]) >= t_before
        found = await rc.ask(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": str(t_before)})
        assert ((found.ext_fields or {})["offset"]) == "0"
        later = await rc.ask(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": str(2**62)})
        assert ((later.ext_fields or {})["offset"]) == "3"
    finally:
        await rc.close()


def lock_body(client_id: str, topic: str, broker: str, queues: list[int]) -> bytes:
    mqs = [{"brokerName": broker, "queueId": q, "topic": topic} for q in queues]
    return json.dumps({"clientId": client_id, "consumerGroup": GROUP, "mqSet": mqs}).encode()


async def test_lock_and_unlock_batch(cluster: LocalCluster) -> None:
    await cluster.create_topic("RL", queues=4)
    broker = cluster.brokers[0].config.broker_name
    a = await Remoting.open(cluster.brokers[0].address)
    b = await Remoting.open(cluster.brokers[0].address)
    try:
        got = await a.ask(RequestCode.LOCK_BATCH_MQ, body=lock_body("A", "RL", broker, [0, 1]))
        assert got.code == ResponseCode.SUCCESS, got.remark
        assert json.loads(got.body) == {
            "lockOKMQSet": [{"brokerName": broker, "queueId": q, "topic": "RL"} for q in (0, 1)]
        }
        other = await b.ask(RequestCode.LOCK_BATCH_MQ, body=lock_body("B", "RL", broker, [1, 2]))
        assert [m["queueId"] for m in json.loads(other.body)["lockOKMQSet"]] == [2]
        unlocked = await a.ask(RequestCode.UNLOCK_BATCH_MQ, body=lock_body("A", "RL", broker, [1]))
        assert unlocked.code == ResponseCode.SUCCESS
        again = await b.ask(RequestCode.LOCK_BATCH_MQ, body=lock_body("B", "RL", broker, [1]))
        assert [m["queueId"] for m in json.loads(again.body)["lockOKMQSet"]] == [1]
    finally:
        await a.close()
        await b.close()


async def test_notify_consumer_ids_changed_reaches_a_remoting_client(cluster: LocalCluster, topic: str) -> None:
    first = await Remoting.open(cluster.brokers[0].address)
    second = await Remoting.open(cluster.brokers[0].address, SerializeType.ROCKETMQ)
    try:
        await first.ask(RequestCode.HEART_BEAT, body=heartbeat_body("first@1", topic, "*"))
        await second.ask(RequestCode.HEART_BEAT, body=heartbeat_body("second@1", topic, "*"))
        deadline = time.monotonic() + 5
        while not [c for c in first.pushed if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]:
            assert time.monotonic() < deadline, first.pushed
            await asyncio.sleep(0.05)
        push = next(c for c in first.pushed if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
        assert push.ext_fields == {"consumerGroup": GROUP} and push.is_oneway and not push.is_response
        assert push.serialize_type is SerializeType.JSON
        ids = await first.ask(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP})
        assert sorted(json.loads(ids.body)["consumerIdList"]) == ["first@1", "second@1"]
    finally:
        await first.close()
        await second.close()


@pytest.mark.parametrize(
    ("code", "ext", "body", "named"),
    [
        (RequestCode.PULL_MESSAGE, {"consumerGroup": GROUP, "topic": "RC", "queueOffset": "0"}, b"", "queueId"),
        (RequestCode.PULL_MESSAGE, {**pull_ext("RC", 0), "queueOffset": "zero"}, b"", "queueOffset"),
        (RequestCode.PULL_MESSAGE, {**pull_ext("RC", 0), "maxMsgNums": "many"}, b"", "maxMsgNums"),
        (RequestCode.PULL_MESSAGE, {**pull_ext("RC", 0, sys_flag=0x4)}, b"", "subscription"),
        (
            RequestCode.PULL_MESSAGE,
            {**pull_ext("RC", 0, sys_flag=0x4, subscription="a>1", expressionType="SQL92")},
            b"",
            "SQL92",
        ),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "queueId": "0"}, b"", "topic"),
        (
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": GROUP, "topic": "RC", "queueId": "0"},
            b"",
            "commitOffset",
        ),
        (RequestCode.GET_MAX_OFFSET, {"topic": "RC"}, b"", "queueId"),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "RC", "queueId": "0"}, b"", "timestamp"),
        (RequestCode.LOCK_BATCH_MQ, None, b"{not json", "not JSON"),
        (RequestCode.LOCK_BATCH_MQ, None, b'{"consumerGroup": "g", "clientId": "c"}', "mqSet"),
        (
            RequestCode.UNLOCK_BATCH_MQ,
            None,
            b'{"consumerGroup": "g", "clientId": "c", "mqSet": [{"topic": "t"}]}',
            "mqSet[0].brokerName",
        ),
    ],
)
async def test_bad_input_is_answered_with_a_remark_naming_the_field(
    cluster: LocalCluster, topic: str, code: int, ext: dict[str, str] | None, body: bytes, named: str
) -> None:
    rc = await Remoting.open(cluster.brokers[0].address)
    try:
        await rc.ask(RequestCode.HEART_BEAT, body=heartbeat_body("c1@1", topic, "*"))
        resp = await rc.ask(code, ext, body)
        assert resp.code == ResponseCode.SYSTEM_ERROR and named in (resp.remark or ""), (resp.code, resp.remark)
        assert "Traceback" not in (resp.remark or "")
        ok = await rc.ask(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})  # the connection lives on
        assert ok.code == ResponseCode.SUCCESS
    finally:
        await rc.close()
