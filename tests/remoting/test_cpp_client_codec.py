"""pymq.remoting's codec judged by the RocketMQ C++ client (rocketmq-client-python 0.5.0rc2).

A small remoting responder built only on :mod:`pymq.remoting` (no pymq daemon yet: the
nameserver/broker handlers are the next step of issue 30) plays nameserver and broker on one
port. The real client's requests must decode with our decoder, and our encoded responses
(``route_body.topic_route_body`` of a pymq TopicRouteData, SendMessageResponseHeader) must be accepted by the client.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pymq.protocol.route import BrokerData, QueueData, TopicRouteData
from pymq.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from pymq.remoting.command import RemotingCommand, RemotingDecoder, encode
from pymq.remoting.message_layout import parse_properties
from pymq.remoting.route_body import topic_route_body
from pymq.remoting.send_header import decode_send_header
from tests.helpers import CheckedThread

from .conftest import run_script

TOPIC = "TopicR30"


class Responder:
    """Remoting server in a thread: routes TOPIC to itself, accepts sends, records every request."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = CheckedThread(self._run, name="remoting-responder")

    def __enter__(self) -> Responder:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.result(10)  # what the responder's thread raised fails the test

    def _run(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    def _answer(self, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            if ext.get("topic") != TOPIC:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"no route for {ext.get('topic')}")
            route = TopicRouteData(
                queueDatas=[QueueData("b0", readQueueNums=4, writeQueueNums=4)],
                brokerDatas=[BrokerData("c0", "b0", {0: f"127.0.0.1:{self.port}"})],
            )
            return cmd.response(ResponseCode.SUCCESS, body=topic_route_body(route))
        if cmd.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            qid = ext.get("queueId", ext.get("e", "0"))
            header = {"msgId": "7F00000100002A9F00000000000000AB", "queueId": qid, "queueOffset": "5"}
            return cmd.response(ResponseCode.SUCCESS, ext_fields=header)
        if cmd.code == RequestCode.UNREGISTER_CLIENT:
            return cmd.response(ResponseCode.SUCCESS)
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f"request code {cmd.code} not supported")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dec = RemotingDecoder()
        try:
            while data := await reader.read(65536):
                for cmd in dec.feed(data):
                    self.requests.append(cmd)
                    if not cmd.is_oneway:
                        writer.write(encode(self._answer(cmd)))
        finally:
            writer.close()


@pytest.fixture
def responder() -> Iterator[Responder]:
    with Responder() as r:
        yield r


def test_cpp_sync_send_round_trips_through_our_codec(cpp_python: Path, responder: Responder, tmp_path: Path) -> None:
    proc = run_script(
        cpp_python,
        "sync_producer.py",
        f"127.0.0.1:{responder.port}",
        TOPIC,
        "TagA",
        "k1 k2",
        "héllo",
        "color=blue",
        home=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result.get("status") == 0 and result["offset"] == 5, result

    routes = [c for c in responder.requests if c.code == RequestCode.GET_ROUTEINFO_BY_TOPIC]
    sends = [c for c in responder.requests if c.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)]
    assert routes and routes[0].ext_fields is not None and routes[0].ext_fields["topic"] == TOPIC
    assert len(sends) == 1
    send = sends[0]
    assert send.language is LanguageCode.CPP
    assert send.serialize_type is SerializeType.JSON
    assert send.body == "héllo".encode()
    ext = send.ext_fields or {}
    assert ext["producerGroup"] == "PG_PYMQ_R30" and ext["topic"] == TOPIC
    props = parse_properties(ext["properties"])
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["color"] == "blue"
    assert props["UNIQ_KEY"] == result["msg_id"]
    header = decode_send_header(send)
    assert (header.producer_group, header.topic, header.properties) == ("PG_PYMQ_R30", TOPIC, props)
    assert header.queue_id == int(ext["queueId"]) and header.born_timestamp > 0 and not header.batch


def test_cpp_client_reads_our_error_response(cpp_python: Path, responder: Responder, tmp_path: Path) -> None:
    proc = run_script(
        cpp_python, "sync_producer.py", f"127.0.0.1:{responder.port}", "NoSuchTopic", "t", "k", "x", home=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "No route info" in result.get("error", ""), result
    asked = {
        (c.ext_fields or {}).get("topic") for c in responder.requests if c.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    }
    assert "NoSuchTopic" in asked
    assert not [c for c in responder.requests if c.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)]
