"""pymq's frames and RocketMQ remoting share the daemons' ports: the first bytes pick the format."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest

from pymq.client import Producer
from pymq.protocol.message import Message
from pymq.remoting.codes import SerializeType
from pymq.remoting.command import RemotingCommand, decode_frame, encode
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


async def _ask(port: int, cmd: RemotingCommand) -> RemotingCommand:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode(cmd))
        (n,) = struct.unpack(">i", await reader.readexactly(4))
        return decode_frame(struct.pack(">i", n) + await reader.readexactly(n))
    finally:
        writer.close()


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
async def test_nameserver_answers_route_cluster_and_topic_list_in_the_request_format(
    cluster: LocalCluster, stype: SerializeType
) -> None:
    await cluster.create_topic("RT", queues=2)
    await cluster.wait_for_route("RT", 1)
    port = int(cluster.namesrv_addr.rsplit(":", 1)[1])
    route = await _ask(port, RemotingCommand(code=105, opaque=41, ext_fields={"topic": "RT"}, serialize_type=stype))
    assert (route.code, route.opaque, route.is_response, route.serialize_type) == (0, 41, True, stype)
    body = json.loads(route.body)
    assert [q["writeQueueNums"] for q in body["queueDatas"]] == [2]
    assert body["brokerDatas"][0]["brokerAddrs"]["0"] == cluster.brokers[0].address
    missing = await _ask(port, RemotingCommand(code=105, opaque=42, ext_fields={"topic": "NOPE"}, serialize_type=stype))
    assert missing.code == 17 and "NOPE" in (missing.remark or "")
    info = json.loads((await _ask(port, RemotingCommand(code=106, serialize_type=stype))).body)
    assert list(info["clusterAddrTable"]) == [cluster.brokers[0].config.cluster_name]
    topics = json.loads((await _ask(port, RemotingCommand(code=206, serialize_type=stype))).body)
    assert "RT" in topics["topicList"]


async def test_unknown_remoting_code_gets_request_code_not_supported_and_native_clients_are_unaffected(
    cluster: LocalCluster,
) -> None:
    await cluster.create_topic("RT2")
    await cluster.wait_for_route("RT2", 1)
    broker_port = int(cluster.brokers[0].address.rsplit(":", 1)[1])
    answer = await _ask(broker_port, RemotingCommand(code=9999, opaque=5))
    assert (answer.code, answer.opaque) == (3, 5)
    assert "9999" in (answer.remark or "")
    async with Producer(cluster.namesrv_addr) as producer:
        result = await producer.send(Message("RT2", b"native"))
    assert result.queue_offset >= 0


async def test_a_broken_remoting_frame_closes_only_that_connection(cluster: LocalCluster) -> None:
    port = int(cluster.namesrv_addr.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    header = b"{not json"
    writer.write(struct.pack(">iI", 4 + len(header), len(header)) + header)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
    writer.close()
    ok = await _ask(port, RemotingCommand(code=206))
    assert ok.code == 0
