"""Producer requests as RocketMQ 4.9's Java client frames them, against an in-process broker.

What the C++ client cannot send (SEND_MESSAGE V1, SEND_BATCH_MESSAGE 320, CONSUMER_SEND_MSG_BACK
alone, QUERY_MESSAGE / VIEW_MESSAGE_BY_ID, ill-formed headers) is sent here as raw remoting frames:
headers named as SendMessageRequestHeader(V2), EndTransactionRequestHeader and
ConsumerSendMsgBackRequestHeader name them, batch bodies written as MessageDecoder.encodeMessages
writes them (a transcription in this file, not pymq's decoder). What was stored is read back
with pymq's own SDK.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, MessageQueue, PullConsumer
from pymq.protocol.record import decode_offset_msg_id
from pymq.remoting.codes import RequestCode, SerializeType
from pymq.remoting.command import RemotingCommand, decode_frame, encode
from pymq.remoting.message_layout import decode_messages
from pymq.testing import LocalCluster
from tests.helpers import read_all, wait_until

pytestmark = pytest.mark.integration

SEP_NV, SEP_P = "\x01", "\x02"


def props(d: dict[str, str]) -> str:
    """MessageDecoder.messageProperties2String."""
    return "".join(f"{k}{SEP_NV}{v}{SEP_P}" for k, v in d.items())


def java_encode_message(body: bytes, properties: dict[str, str], flag: int = 0) -> bytes:
    """MessageDecoder.encodeMessage (4.9): totalSize, magic 0, bodyCRC 0, flag, bodyLen+body, i16+properties."""
    p = props(properties).encode()
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(p)
    return struct.pack(">iiiii", size, 0, 0, flag, len(body)) + body + struct.pack(">h", len(p)) + p


class Conn:
    """One remoting connection: requests out, responses (and the broker's pushes) in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.pushes: list[RemotingCommand] = []
        self._opaque = 100
        host, port = writer.get_extra_info("sockname")[:2]
        self.local = f"{host}:{port}"

    async def read(self) -> RemotingCommand:
        (n,) = struct.unpack(">i", await self.reader.readexactly(4))
        return decode_frame(struct.pack(">i", n) + await self.reader.readexactly(n))

    def send(self, cmd: RemotingCommand) -> int:
        self._opaque += 1
        cmd.opaque = self._opaque
        self.writer.write(encode(cmd))
        return cmd.opaque

    async def ask(self, cmd: RemotingCommand, timeout: float = 10) -> RemotingCommand:
        opaque = self.send(cmd)
        while True:
            got = await asyncio.wait_for(self.read(), timeout)
            if got.is_response and got.opaque == opaque:
                return got
            self.pushes.append(got)


@pytest.fixture
async def conn(cluster: LocalCluster) -> AsyncIterator[Conn]:
    port = int(cluster.brokers[0].address.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield Conn(reader, writer)
    finally:
        writer.close()


def v1_header(topic: str, properties: dict[str, str], queue_id: int = 0, **over: str) -> dict[str, str]:
    ext = {
        "producerGroup": "PG_FRAMES",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": "0",
        "bornTimestamp": "1700000000123",
        "flag": "7",
        "properties": props(properties),
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
    }
    ext.update(over)
    return ext


V2 = {
    "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
    "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j", "unitMode": "k",
    "maxReconsumeTimes": "l", "batch": "m",
}  # fmt: skip


def v2_header(v1: dict[str, str]) -> dict[str, str]:
    return {V2[k]: v for k, v in v1.items() if k in V2}


@pytest.mark.parametrize(
    ("code", "stype"),
    [
        (RequestCode.SEND_MESSAGE, SerializeType.JSON),
        (RequestCode.SEND_MESSAGE_V2, SerializeType.JSON),
        (RequestCode.SEND_MESSAGE_V2, SerializeType.ROCKETMQ),
    ],
)
async def test_send_stores_one_record_and_answers_offset_msg_id(
    cluster: LocalCluster, conn: Conn, code: RequestCode, stype: SerializeType
) -> None:
    await cluster.create_topic("FrameT", 4)
    p = {"TAGS": "tg", "KEYS": "ka kb", "UNIQ_KEY": "U1", "user": "v", "WAIT": "true"}
    ext = v1_header("FrameT", p, queue_id=2, reconsumeTimes="3")
    if code == RequestCode.SEND_MESSAGE_V2:
        ext = v2_header(ext)
    resp = await conn.ask(RemotingCommand(code=code, ext_fields=ext, body=b"\x00body\xff", serialize_type=stype))
    assert (resp.code, resp.serialize_type) == (0, stype), resp.remark
    h = resp.ext_fields or {}
    assert h["queueId"] == "2" and h["queueOffset"] == "0" and "transactionId" not in h
    [m] = await read_all(cluster, "FrameT", 1)
    assert m.offset_msg_id == h["msgId"]
    assert decode_offset_msg_id(h["msgId"]) == (cluster.brokers[0].address, m.commitlog_offset)
    assert (m.body, m.queue_id, m.queue_offset, m.flag, m.born_timestamp) == (b"\x00body\xff", 2, 0, 7, 1700000000123)
    assert m.reconsume_times == 3 and m.born_host == conn.local
    assert (m.tags, m.keys, m.msg_id, m.properties["user"]) == ("tg", ["ka", "kb"], "U1", "v")


async def test_ill_formed_headers_are_answered_naming_the_field_and_store_nothing(
    cluster: LocalCluster, conn: Conn
) -> None:
    await cluster.create_topic("FrameBad", 2)
    store = cluster.brokers[0].store
    before = store.max_phy_offset
    good = v1_header("FrameBad", {"UNIQ_KEY": "x"})
    cases = [
        (RequestCode.SEND_MESSAGE, {k: v for k, v in good.items() if k != "topic"}, "topic"),
        (RequestCode.SEND_MESSAGE, {**good, "bornTimestamp": "soon"}, "bornTimestamp"),
        (RequestCode.SEND_MESSAGE_V2, {**v2_header(good), "e": "1.5"}, "queueId"),
        (RequestCode.SEND_MESSAGE_V2, {k: v for k, v in v2_header(good).items() if k != "a"}, "producerGroup"),
        (RequestCode.SEND_MESSAGE, {**good, "queueId": "9"}, "queueId"),
    ]
    for code, ext, field in cases:
        resp = await conn.ask(RemotingCommand(code=code, ext_fields=ext, body=b"x"))
        assert resp.code == 1, (field, resp)
        assert field in (resp.remark or ""), (field, resp.remark)
    missing = await conn.ask(RemotingCommand(code=10, ext_fields=v1_header("NoSuchTopic", {}), body=b"x"))
    assert missing.code == 17 and "NoSuchTopic" in (missing.remark or "")
    assert store.max_phy_offset == before


async def test_send_batch_message_stores_each_message_and_answers_their_ids(cluster: LocalCluster, conn: Conn) -> None:
    await cluster.create_topic("FrameBatch", 1)
    entries = [(f"body-{i}".encode(), {"KEYS": f"key{i}", "UNIQ_KEY": f"UQ{i}", "i": str(i)}, i) for i in range(3)]
    body = b"".join(java_encode_message(b, p, flag) for b, p, flag in entries)
    ext = v2_header(v1_header("FrameBatch", {"WAIT": "true"}, batch="true"))
    resp = await conn.ask(RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=ext, body=body))
    assert resp.code == 0, resp.remark
    ids = (resp.ext_fields or {})["msgId"].split(",")
    got = await read_all(cluster, "FrameBatch", 3)
    assert [m.offset_msg_id for m in got] == ids and len(set(ids)) == 3
    assert [(m.body, m.flag, m.keys, m.msg_id, m.properties["i"]) for m in got] == [
        (b, flag, [p["KEYS"]], p["UNIQ_KEY"], p["i"]) for b, p, flag in entries
    ]
    assert all(m.properties["WAIT"] == "true" for m in got)  # the header's properties join each message's
    assert (resp.ext_fields or {})["queueOffset"] == "0"

    # VIEW_MESSAGE_BY_ID and QUERY_MESSAGE answer in MessageDecoder's layout
    _, offset = decode_offset_msg_id(ids[1])
    view = await conn.ask(RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(offset)}))
    assert view.code == 0, view.remark
    [vm] = decode_messages(view.body)
    assert (vm.topic, vm.body, vm.commit_log_offset, vm.flag) == ("FrameBatch", b"body-1", offset, 1)
    assert vm.properties["UNIQ_KEY"] == "UQ1"
    now = int(time.time() * 1000)
    q = {"topic": "FrameBatch", "key": "key2", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(now + 60000)}
    found = await conn.ask(RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=q))
    assert found.code == 0, found.remark
    [qm] = decode_messages(found.body)
    assert (qm.body, qm.properties["KEYS"]) == (b"body-2", "key2")
    assert int((found.ext_fields or {})["indexLastUpdateTimestamp"]) == qm.store_timestamp
    nothing = await conn.ask(RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={**q, "key": "nope"}))
    assert nothing.code == 22  # QUERY_NOT_FOUND
    gone = await conn.ask(RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": "99999999"}))
    assert gone.code != 0 and gone.remark


async def test_bad_batches_are_refused_and_store_nothing(cluster: LocalCluster, conn: Conn) -> None:
    await cluster.create_topic("FrameBatch2", 1)
    before = cluster.brokers[0].store.max_phy_offset
    one = java_encode_message(b"ok", {"UNIQ_KEY": "a"})
    ext = v2_header(v1_header("FrameBatch2", {}, batch="true"))
    for body in (one + one[:10], one[:-1], struct.pack(">i", 999) + one[4:]):
        resp = await conn.ask(RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=ext, body=body))
        assert resp.code == 1 and "body" in (resp.remark or ""), resp
    retry = v2_header(v1_header("%RETRY%g", {}, batch="true"))
    resp = await conn.ask(RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=retry, body=one))
    assert resp.code == 13 and "retry" in (resp.remark or "")
    assert cluster.brokers[0].store.max_phy_offset == before


async def test_consumer_send_msg_back_reaches_the_dead_letter_queue(cluster: LocalCluster, conn: Conn) -> None:
    await cluster.create_topic("FrameBack", 1)
    sent = await conn.ask(
        RemotingCommand(code=10, ext_fields=v1_header("FrameBack", {"UNIQ_KEY": "B1"}), body=b"back-me")
    )
    _, offset = decode_offset_msg_id((sent.ext_fields or {})["msgId"])
    back = {
        "offset": str(offset),
        "group": "CG_BACK",
        "delayLevel": "-1",
        "originMsgId": "B1",
        "originTopic": "FrameBack",
        "unitMode": "false",
        "maxReconsumeTimes": "16",
    }
    resp = await conn.ask(RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=back))
    assert resp.code == 0, resp.remark
    pc = PullConsumer(cluster.namesrv_addr, "dlq-reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue("%DLQ%CG_BACK", "broker-a", 0)])
    async with pc:
        got = await pc.poll(timeout=5)
    assert [(m.body, m.msg_id) for m in got] == [(b"back-me", "B1")]
    no_group = {k: v for k, v in back.items() if k != "group"}
    bad = await conn.ask(RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=no_group))
    assert bad.code == 1 and "group" in (bad.remark or "")


@pytest.fixture
async def tx_cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    broker = {"transaction_timeout_seconds": 1.0, "transaction_check_interval_seconds": 0.2}
    async with LocalCluster(tmp_path / "tx", broker=broker) as c:
        yield c


async def test_prepared_send_end_transaction_and_check_back(tx_cluster: LocalCluster) -> None:
    cluster = tx_cluster
    await cluster.create_topic("FrameTx", 2)
    port = int(cluster.brokers[0].address.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = Conn(reader, writer)
    try:
        hb = {"clientID": "127.0.0.1@frames", "producerDataSet": [{"groupName": "PG_TX"}], "consumerDataSet": []}
        assert (await conn.ask(RemotingCommand(code=34, body=json.dumps(hb).encode()))).code == 0

        async def prepared(body: bytes, uniq: str) -> dict[str, str]:
            p = {"TRAN_MSG": "true", "PGROUP": "PG_TX", "UNIQ_KEY": uniq}
            ext = v2_header(v1_header("FrameTx", p, queue_id=1, producerGroup="PG_TX", sysFlag="4"))  # Java: PREPARED
            r = await conn.ask(RemotingCommand(code=310, ext_fields=ext, body=body))
            assert r.code == 0, r.remark
            assert (r.ext_fields or {})["transactionId"] == uniq
            return r.ext_fields or {}

        def end(h: dict[str, str], how: int, **over: str) -> RemotingCommand:
            _, offset = decode_offset_msg_id(h["msgId"])
            ext = {
                "producerGroup": "PG_TX",
                "tranStateTableOffset": h["queueOffset"],
                "commitLogOffset": str(offset),
                "commitOrRollback": str(how),
                "fromTransactionCheck": "false",
                "msgId": h.get("transactionId", ""),
                "transactionId": h.get("transactionId", ""),
                **over,
            }
            return RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=ext, flag=2)  # oneway

        commit, rollback = await prepared(b"tx-commit", "T1"), await prepared(b"tx-rollback", "T2")
        conn.send(end(commit, 8))
        conn.send(end(rollback, 12))
        got = await read_all(cluster, "FrameTx", 1)
        assert [(m.body, m.queue_id, m.msg_id) for m in got] == [(b"tx-commit", 1, "T1")]
        bad = end(commit, 8)
        bad.flag = 0
        del (bad.ext_fields or {})["producerGroup"]
        answer = await conn.ask(bad)
        assert answer.code == 1 and "producerGroup" in (answer.remark or "")

        # an undecided one: the broker asks this connection, the producer of PG_TX
        await prepared(b"tx-ask-me", "T3")
        push = await asyncio.wait_for(conn.read(), 10)
        while push.is_response:
            push = await asyncio.wait_for(conn.read(), 10)
        assert (push.code, push.is_oneway) == (RequestCode.CHECK_TRANSACTION_STATE, True)
        h = push.ext_fields or {}
        [half] = decode_messages(push.body)
        assert (half.topic, half.queue_id, half.body) == ("FrameTx", 1, b"tx-ask-me")
        assert half.properties["UNIQ_KEY"] == h["msgId"] == h["transactionId"] == "T3"
        assert half.commit_log_offset == int(h["commitLogOffset"])
        assert decode_offset_msg_id(h["offsetMsgId"]) == (cluster.brokers[0].address, int(h["commitLogOffset"]))
        conn.send(
            RemotingCommand(
                code=RequestCode.END_TRANSACTION,
                flag=2,
                ext_fields={
                    "producerGroup": "PG_TX",
                    "tranStateTableOffset": h["tranStateTableOffset"],
                    "commitLogOffset": h["commitLogOffset"],
                    "commitOrRollback": "8",
                    "fromTransactionCheck": "true",
                    "msgId": "T3",
                    "transactionId": "T3",
                },
            )
        )
        got = await read_all(cluster, "FrameTx", 2)
        assert sorted(m.body for m in got) == [b"tx-ask-me", b"tx-commit"]
    finally:
        writer.close()


async def test_a_retry_published_past_its_max_reconsume_times_goes_to_the_dead_letter_queue(
    cluster: LocalCluster, conn: Conn
) -> None:
    """The Java consumer's fallback when its send-back fails: it publishes to %RETRY%group itself,
    with reconsumeTimes and maxReconsumeTimes in the header (the property moved there)."""
    hb = {
        "clientID": "127.0.0.1@retry",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": "CG_FALLBACK",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [],
                "unitMode": False,
            }
        ],
    }
    assert (await conn.ask(RemotingCommand(code=34, body=json.dumps(hb).encode()))).code == 0
    await wait_until(lambda: cluster.brokers[0].topics.get("%RETRY%CG_FALLBACK") is not None, what="retry topic")
    retry = "%RETRY%CG_FALLBACK"
    for body, times in ((b"exhausted", "5"), (b"again", "2")):
        ext = v2_header(v1_header(retry, {"UNIQ_KEY": body.decode()}, reconsumeTimes=times, maxReconsumeTimes="3"))
        resp = await conn.ask(RemotingCommand(code=310, ext_fields=ext, body=body))
        assert resp.code == 0, resp.remark
    pc = PullConsumer(cluster.namesrv_addr, "fallback-reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue("%DLQ%CG_FALLBACK", "broker-a", 0), MessageQueue(retry, "broker-a", 0)])
    got = []
    async with pc:
        while len(got) < 2 and (batch := await pc.poll(timeout=3)):
            got.extend(batch)
    assert sorted((m.topic, m.body) for m in got) == [("%DLQ%CG_FALLBACK", b"exhausted"), (retry, b"again")]
