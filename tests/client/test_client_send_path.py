"""The producer's single-send fast path: Connection.send_request, and what the send path caches."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import struct
import threading
import time

import msgpack
import pytest

from pymq.client.producer import Producer, SendStatus
from pymq.client.routes import RouteCache
from pymq.client.selectors import RoundRobinSelector
from pymq.client.sync import _LoopThread
from pymq.errors import ClientError, RemoteProtocolError
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import FLAG_RESPONSE, Command
from pymq.protocol.frame import FrameDecoder, encode_bytes
from pymq.protocol.message import Message, UniqueIdGenerator, decode_message
from pymq.protocol.route import BrokerData, MessageQueue, QueueData, TopicRouteData
from pymq.testing import MockBroker
from pymq.transport.codec import default_codec
from pymq.transport.connection import Connection
from tests.helpers import RecordingTransport

SEND = RequestCode.SEND_MESSAGE


def _client_connection() -> tuple[Connection, RecordingTransport]:
    conn = Connection(None, default_codec())
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


async def test_send_request_writes_at_once_and_its_future_gets_the_answer() -> None:
    conn, transport = _client_connection()
    cmd = Command(SEND, 0, 0, None, {"topic": "t"}, b"body")
    fut = conn.send_request(cmd, 3.0)
    assert fut is not None and not fut.done()
    (sent,) = FrameDecoder().feed(transport.calls[0])
    assert sent.opaque == cmd.opaque and sent.ext == {"topic": "t"} and sent.body_bytes() == b"body"
    conn.data_received(encode_bytes(Command(0, cmd.opaque, FLAG_RESPONSE, None, {"queueId": 1})))
    assert (await fut).ext == {"queueId": 1}
    assert conn.in_flight == 0
    conn.connection_lost(None)


async def test_send_request_writes_nothing_on_a_closing_connection_and_abandon_forgets() -> None:
    conn, transport = _client_connection()
    transport.closed = True
    assert conn.send_request(Command(SEND), 3.0) is None and not transport.calls
    transport.closed = False
    cmd = Command(SEND)
    fut = conn.send_request(cmd, 3.0)
    assert fut is not None and conn.in_flight == 1
    conn.abandon(cmd.opaque)
    assert conn.in_flight == 0
    fut.cancel()
    conn.connection_lost(None)


async def test_a_cancelled_send_leaves_no_pending_request() -> None:
    async with MockBroker("broker-a") as a:
        a.add_topic("orders", [a], queues=1)
        a.script(SEND, MockBroker.delay(30))
        async with Producer(a.address, send_timeout=30) as producer:
            task = asyncio.ensure_future(producer.send(Message("orders", b"x")))
            for _ in range(500):
                if a.requests_of(SEND):
                    break
                await asyncio.sleep(0.01)
            assert a.requests_of(SEND)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert producer.instance is not None
            conn = producer.instance.rpc.connection_if_any(a.address)
            assert conn is not None and conn.in_flight == 0


async def test_send_results_reuse_the_selected_queue_and_name_the_stored_one() -> None:
    async with MockBroker("broker-a") as a:
        a.add_topic("orders", [a], queues=2)
        async with Producer(a.address, selector=RoundRobinSelector(start=-1)) as producer:
            queues = await producer.queues_for("orders")
            first = await producer.send(Message("orders", b"one"))
            second = await producer.send(Message("orders", b"two"))
            explicit = await producer.send(Message("orders", b"three"), queue=MessageQueue("orders", "broker-a", 1))
    assert first.status is SendStatus.SEND_OK and first.message_queue is queues[0]
    assert second.message_queue is queues[1] and second.queue_offset == 0
    assert explicit.message_queue == MessageQueue("orders", "broker-a", 1) and explicit.queue_offset == 1
    assert first.commit_log_offsets and first.offset_msg_id


def test_unique_ids_format_their_counter_as_four_hex_digits() -> None:
    gen = UniqueIdGenerator("10.0.0.1")
    now = 1_700_000_000_000
    ids = [gen.next_id(now) for _ in range(0x10002)]
    assert {len(i) for i in ids} == {32} and len({i[:-4] for i in ids}) == 1
    assert [i[-4:] for i in ids] == [f"{n & 0xFFFF:04X}" for n in range(0x10002)]
    assert gen.id_head() != ids[0][:-4] or int(time.time() * 1000) == now  # the given time, not the clock's


@pytest.mark.parametrize("body", [b"", b"payload" * 100])
def test_a_single_whole_frame_decodes_as_the_frame_loop_does(body: bytes) -> None:
    cmd = Command(SEND, 77, FLAG_RESPONSE, "remark", {"queueId": 1, "commitLogOffsets": [5]}, body)
    frame = encode_bytes(cmd)
    (whole,) = FrameDecoder().feed(frame)  # one read, one frame: the fast path
    split = FrameDecoder()
    assert split.feed(frame[:10]) == []
    (pieced,) = split.feed(frame[10:])  # held bytes: the loop
    for got in (whole, pieced):
        assert (got.code, got.opaque, got.flags, got.remark, got.ext) == (SEND, 77, FLAG_RESPONSE, "remark", cmd.ext)
        assert got.body_bytes() == body


def test_a_single_malformed_frame_is_still_refused() -> None:
    header = msgpack.packb([1, 2, 3], use_bin_type=True)
    frame = struct.pack(">II", 4 + len(header), len(header)) + header
    with pytest.raises(RemoteProtocolError, match="5-element array"):
        FrameDecoder().feed(frame)


def test_the_sync_facades_blocking_call_returns_raises_and_cancels_on_timeout() -> None:
    runner = _LoopThread.get()

    async def ok() -> int:
        return 5

    async def bad() -> None:
        raise ClientError("boom")

    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    assert runner.run(ok()) == 5
    with pytest.raises(ClientError, match="boom"):
        runner.run(bad())
    with pytest.raises(TimeoutError, match="did not finish"):
        runner.run(slow(), timeout=0.05)
    assert cancelled.wait(10)

    async def cancels_itself() -> None:
        raise asyncio.CancelledError

    with pytest.raises(concurrent.futures.CancelledError):  # as run_coroutine_threadsafe's future says it
        runner.run(cancels_itself())
    with pytest.raises(TimeoutError):
        runner.run(slow(), timeout=-1.0)  # a spent budget: no wait at all


def test_the_cached_master_address_follows_route_changes() -> None:
    async def no_fetch(topic: str) -> TopicRouteData | None:
        return None

    routes = RouteCache(no_fetch)
    qd = [QueueData("broker-a", 4, 4)]
    routes.put("t", TopicRouteData(qd, [BrokerData("c", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})]))
    assert routes.master_addr("broker-a") == routes.broker_addr("broker-a") == "10.0.0.1:10911"
    routes.put("t", TopicRouteData(qd, [BrokerData("c", "broker-a", {0: "10.0.0.3:10911"})]))  # a new master
    assert routes.master_addr("broker-a") == routes.broker_addr("broker-a") == "10.0.0.3:10911"
    routes.put("t", TopicRouteData(qd, [BrokerData("c", "broker-a", {1: "10.0.0.2:10911"})]))  # the master gone
    assert routes.master_addr("broker-a") is None and routes.broker_addr("broker-a") is None
    assert routes.broker_addr("broker-a", master_only=False) == "10.0.0.2:10911"
    assert routes.master_addr("broker-b") is None


async def test_a_send_after_the_master_moved_goes_to_the_new_master() -> None:
    async with MockBroker("broker-a") as old, MockBroker("broker-a") as new, MockBroker("namesrv") as ns:
        ns.add_topic("orders", [old], queues=1)
        async with Producer(ns.address) as producer:
            first = await producer.send(Message("orders", b"one"))
            assert producer.instance is not None
            ns.add_topic("orders", [new], queues=1)
            await producer.instance.update_route("orders")
            second = await producer.send(Message("orders", b"two"))
    assert first.store_addr == old.address and second.store_addr == new.address
    assert len(old.stored("orders")) == 1 and len(new.stored("orders")) == 1


@pytest.mark.parametrize(
    "msg",
    [
        Message("orders", b"plain"),  # the accelerator's batch-of-one path, when built
        Message("orders", b"tagged", tags="created"),
        Message("orders", b"keyed", tags="t", keys=["k1", "k2"], properties={"a": "b"}),  # the general encoder
        Message("orders", b"z" * 5000),  # compressed: the general encoder
    ],
)
async def test_a_single_send_carries_the_general_encoders_bytes(msg: Message, record_impl: str) -> None:
    async with MockBroker("broker-a") as a:
        a.add_topic("orders", [a], queues=1)
        async with Producer(a.address) as producer:
            result = await producer.send(msg)
            (sent,) = a.requests_of(SEND)
            stored = decode_message(sent.body_bytes())
            assert stored.properties["UNIQ_KEY"] == result.msg_id and result.msg_ids == [result.msg_id]
            # the same message, id and clock through Producer._encode (the general per-message encoder)
            ids = UniqueIdGenerator()
            ids._prefix = result.msg_id[:20]
            ids._counter = itertools.count(int(result.msg_id[-4:], 16))
            producer._ids = ids
            expected, uniq = producer._encode(msg, None, stored.born_timestamp)
    assert uniq == result.msg_id and sent.body_bytes() == expected
