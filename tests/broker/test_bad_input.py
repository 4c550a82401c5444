"""Bad input gets a clear error response, never a crash: the broker keeps serving everyone else."""

from __future__ import annotations

import asyncio

import pytest

from pymq.client import Message, Producer
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.record import encode_record
from pymq.testing import LocalCluster
from pymq.transport.client import RpcClient

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("code", "ext", "body", "expected"),
    [
        (RequestCode.SEND_MESSAGE, {}, b"", ResponseCode.INVALID_PARAMETER),
        (RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": "x"}, b"", ResponseCode.INVALID_PARAMETER),
        (RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": 0}, b"garbage-not-a-record", ResponseCode.MESSAGE_ILLEGAL),
        (RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": 9}, b"", ResponseCode.INVALID_PARAMETER),
        (RequestCode.SEND_MESSAGE, {"topic": "missing", "queueId": 0}, b"", ResponseCode.TOPIC_NOT_EXIST),
        (RequestCode.SEND_MESSAGE, {"topic": "bad name!", "queueId": 0}, b"", ResponseCode.INVALID_PARAMETER),
        (RequestCode.PULL_MESSAGE, {"topic": "t"}, b"", ResponseCode.INVALID_PARAMETER),
        (RequestCode.HEART_BEAT, {}, b"\xc1\xff", ResponseCode.INVALID_PARAMETER),
        (RequestCode.HEART_BEAT, {}, encode_body({"nope": 1}), ResponseCode.INVALID_PARAMETER),
        (RequestCode.LOCK_BATCH_MQ, {}, encode_body({"consumerGroup": "g"}), ResponseCode.INVALID_PARAMETER),
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "x", "readQueueNums": 0}, b"", ResponseCode.INVALID_PARAMETER),
        (
            RequestCode.UPDATE_BROKER_CONFIG,
            {},
            encode_body({"store.disk_full_ratio": 7}),
            ResponseCode.INVALID_PARAMETER,
        ),
        (RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 123456789}, b"", ResponseCode.QUERY_NOT_FOUND),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g", "offset": 999999}, b"", ResponseCode.SYSTEM_ERROR),
        (4242, {}, b"", ResponseCode.REQUEST_CODE_NOT_SUPPORTED),
    ],
)
async def test_bad_requests_get_error_codes(tmp_path, code, ext, body, expected) -> None:
    """Each malformed request gets its error code with a message, and the broker still serves a good send."""
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("t", 2)
        broker = cluster.brokers[0].address
        async with RpcClient() as rpc:
            resp = await rpc.invoke(broker, Command.request(code, ext, body))
            assert resp.code == expected, (resp.code, resp.remark)
            assert resp.remark
        async with Producer(cluster.namesrv_addr) as p:
            assert (await p.send(Message("t", b"still fine"))).queue_offset >= 0


async def test_bad_record_in_batch_rejected_alone(tmp_path) -> None:
    """A batch with one corrupt record stores the others and reports which one failed."""
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("t", 1)
        good = encode_record(b"t", b"ok", b"")
        bad = bytearray(encode_record(b"t", b"corrupted body", b""))
        bad[95] ^= 0xFF  # flip a body byte: the CRC no longer matches
        body = good + bytes(bad) + good
        async with RpcClient() as rpc:
            resp = await rpc.invoke(
                cluster.brokers[0].address,
                Command.request(RequestCode.SEND_BATCH_MESSAGE, {"topic": "t", "queueId": 0}, body),
            )
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "crc" in resp.remark
        assert resp.ext["statuses"] == [0, 6, 0]
        assert cluster.brokers[0].store.max_offset("t", 0) == 2


async def test_garbage_connection_closed_others_unaffected(tmp_path) -> None:
    """Garbage bytes close that connection only; a producer on another connection keeps working."""
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("t", 1)
        host, port = cluster.brokers[0].address.split(":")
        async with Producer(cluster.namesrv_addr) as p:
            await p.send(Message("t", b"before"))
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"\xff\xff\xff\xffgarbage")
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the broker
            writer.close()
            assert (await p.send(Message("t", b"after"))).queue_offset == 1


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_empty_send_is_message_illegal(tmp_path, flush) -> None:
    """A SEND_MESSAGE with no record at all is MESSAGE_ILLEGAL with a clear remark under either flush
    mode (it used to answer SUCCESS at queue offset -1, or SYSTEM_ERROR under SYNC_FLUSH)."""
    async with LocalCluster(tmp_path / "c", store={"flush_disk_type": flush}) as cluster:
        await cluster.create_topic("t", 1)
        broker = cluster.brokers[0]
        async with RpcClient() as rpc:
            for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE):
                resp = await rpc.invoke(broker.address, Command.request(code, {"topic": "t", "queueId": 0}, b""))
                assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (resp.code, resp.remark)
                assert "empty message body" in resp.remark
        assert broker.store.max_offset("t", 0) == 0


_PULL = {"consumerGroup": "g", "topic": "t", "queueId": 0, "queueOffset": 0}


async def test_out_of_range_and_non_integer_fields_are_invalid_parameter(tmp_path) -> None:
    """Typed validation: a non-integer number or a value out of its field's range answers INVALID_PARAMETER
    naming the field (it used to be truncated, clamped, or answered SYSTEM_ERROR)."""
    requests = [
        (RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": 1.5}, "queueId"),
        (RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": "1.5"}, "queueId"),
        (RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": 2}, "queueId"),
        (RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": 2**31}, "queueId"),
        (RequestCode.PULL_MESSAGE, {**_PULL, "queueId": -1}, "queueId"),
        (RequestCode.PULL_MESSAGE, {**_PULL, "queueId": 2}, "queueId"),
        (RequestCode.PULL_MESSAGE, {**_PULL, "queueId": 0.5}, "queueId"),
        (RequestCode.PULL_MESSAGE, {**_PULL, "maxMsgNums": 2**31}, "maxMsgNums"),
        (RequestCode.PULL_MESSAGE, {**_PULL, "maxMsgNums": 0}, "maxMsgNums"),
        (RequestCode.PULL_MESSAGE, {**_PULL, "maxMsgNums": 1025}, "maxMsgNums"),
        (RequestCode.PULL_MESSAGE, {**_PULL, "queueOffset": 2**64 - 1}, "queueOffset"),
    ]
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("t", 2)
        broker = cluster.brokers[0].address
        record = encode_record(b"t", b"x", b"")
        async with RpcClient() as rpc:
            for code, ext, field in requests:
                resp = await rpc.invoke(broker, Command.request(code, ext, record))
                assert (resp.code, field in (resp.remark or "")) == (ResponseCode.INVALID_PARAMETER, True), (
                    ext,
                    resp.code,
                    resp.remark,
                )
            assert cluster.brokers[0].store.max_offset("t", 0) == 0
            # An integral float is an integer: this send is stored.
            send = Command.request(RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": 1.0}, record)
            ok = await rpc.invoke(broker, send)
            assert ok.code == ResponseCode.SUCCESS and ok.ext["queueId"] == 1
