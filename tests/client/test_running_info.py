"""The consumer's running info (GET_CONSUMER_RUNNING_INFO, issue 33) without sockets: queues, times, stacks."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from pymq.client import running_info as ri
from pymq.client.instance import ClientInstance
from pymq.client.process_queue import ProcessQueue
from pymq.client.push_consumer import PushConsumer
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.message import MessageExt, decode_message
from pymq.protocol.record import encode_record
from pymq.protocol.requests import ConsumerRunningInfoRequest
from pymq.protocol.route import MessageQueue
from pymq.testing import FakeClock


def ext(offset: int, body: bytes = b"xyz") -> MessageExt:
    return decode_message(encode_record(b"T", body, b"", queue_offset=offset))


def consumer_with_queues(clock: FakeClock) -> tuple[PushConsumer, ProcessQueue, ProcessQueue]:
    c = PushConsumer("127.0.0.1:1", "g-info", clock=clock, consume_concurrency=3)
    c.subscribe("T", "TagA || TagB")
    busy, idle = ProcessQueue(clock), ProcessQueue(clock)
    c.ownership.process_queues[MessageQueue("T", "broker-b", 1)] = busy
    c.ownership.process_queues[MessageQueue("T", "broker-a", 0)] = idle
    return c, busy, idle


def test_running_info_describes_each_owned_queue() -> None:
    """Cached count/bytes and offsets, lock state and the last pull/consume times as epoch ms."""
    clock = FakeClock(start=100.0, wall_ms=1_700_000_000_000)
    c, busy, _idle = consumer_with_queues(clock)
    busy.add([ext(5), ext(6), ext(7, b"12345")])
    busy.remove([ext(5)])  # consumed at t=100
    busy.locked, busy.last_lock_time = True, 101.0
    clock.now = 103.0
    busy.last_pull_time = 102.5
    info = ri.running_info(c, "10.0.0.1@1")
    assert info["clientId"] == "10.0.0.1@1" and info["group"] == "g-info"
    props = info["properties"]
    assert props["consumeType"] == "CONSUME_PASSIVELY" and props["messageModel"] == "CLUSTERING"
    assert props["consumeOrderly"] is False and props["consumeConcurrency"] == 3 and props["language"] == "PYTHON"
    assert props["nowTimestamp"] == 1_700_000_003_000
    assert [s["topic"] for s in info["subscriptionSet"]] == ["T"]
    assert info["subscriptionSet"][0]["subString"] == "TagA || TagB"
    assert "jstack" not in info
    # sorted by queue: broker-a first
    assert [r["mq"] for r in info["mqTable"]] == [
        {"topic": "T", "brokerName": "broker-a", "queueId": 0},
        {"topic": "T", "brokerName": "broker-b", "queueId": 1},
    ]
    empty, pq = info["mqTable"][0]["pq"], info["mqTable"][1]["pq"]
    assert empty["cachedMsgCount"] == 0 and empty["cachedMsgMinOffset"] == -1 and empty["cachedMsgMaxOffset"] == -1
    assert empty["locked"] is False and empty["lastLockTimestamp"] == 0
    assert pq["cachedMsgCount"] == 2 and pq["cachedMsgSizeInBytes"] == 3 + 5
    assert (pq["cachedMsgMinOffset"], pq["cachedMsgMaxOffset"], pq["commitOffset"]) == (6, 7, 6)
    assert pq["locked"] is True and pq["lastLockTimestamp"] == 1_700_000_001_000
    assert pq["lastPullTimestamp"] == 1_700_000_002_500
    assert pq["lastConsumeTimestamp"] == 1_700_000_000_000
    assert pq["droped"] is False
    # the body is plain msgpack
    assert msgpack.unpackb(msgpack.packb(info), strict_map_key=False) == info


async def test_stacks_list_threads_and_tasks_grouping_identical_stacks() -> None:
    """Threads by name; asyncio tasks with the same stack once, with their count and names."""
    gate = asyncio.Event()

    async def parked_somewhere() -> None:
        await gate.wait()

    tasks = [asyncio.create_task(parked_somewhere(), name=f"waiter-{i}") for i in range(7)]
    await asyncio.sleep(0)
    try:
        text = ri.stacks_text()
    finally:
        gate.set()
        await asyncio.gather(*tasks)
    assert text.startswith("Threads (")
    assert '"MainThread"' in text
    assert "7 task(s): waiter-0 (test_stacks_list_threads_and_tasks_grouping_identical_stacks.<locals>" in text
    assert "... 2 more" in text
    # the chain of awaits down to the innermost, not only the task's own frame
    chain = text[text.index("7 task(s)") :].splitlines()[1:5]
    assert [line.rsplit(" in ", 1)[-1].strip() for line in chain] == [
        "parked_somewhere",
        "wait",
        "awaiting a Future",
        "",
    ]
    assert text.count("in parked_somewhere") == 1  # one group, printed once


async def test_stacks_are_cut_at_the_limit() -> None:
    text = ri.stacks_text(limit=200)
    assert len(text) < 260 and text.endswith("... cut at 200 characters")


async def test_the_client_instance_answers_for_its_consumer_or_says_it_has_none() -> None:
    """The instance's GET_CONSUMER_RUNNING_INFO handler: msgpack running info, with stacks when asked."""
    clock = FakeClock()
    c, _, _ = consumer_with_queues(clock)
    inst = ClientInstance.__new__(ClientInstance)  # only what the handler reads
    inst.client_id = "10.0.0.1@1"
    inst.consumers = {"g-info": c}

    def ask(group: str, jstack: bool) -> Command:
        header = ConsumerRunningInfoRequest(consumer_group=group, client_id="10.0.0.1@1", jstack_enable=jstack)
        return inst._on_running_info(Command.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext()), None)  # type: ignore[arg-type]

    answer = ask("g-info", True)
    assert answer.code == ResponseCode.SUCCESS
    body = msgpack.unpackb(answer.body_bytes(), strict_map_key=False)
    assert body["group"] == "g-info" and len(body["mqTable"]) == 2
    assert "Asyncio tasks (" in body["jstack"]
    assert "jstack" not in msgpack.unpackb(ask("g-info", False).body_bytes(), strict_map_key=False)
    missing = ask("g-other", False)
    assert missing.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert "g-other" in (missing.remark or "") and "10.0.0.1@1" in (missing.remark or "")


#: what the RocketMQ C++ client 2.x answered (observed against pymq-broker; trimmed to one queue)
CPP_ANSWER = """{"mqTable":{{
   "brokerName" : "broker-a",
   "queueId" : 0,
   "topic" : "t-run"
}:{
   "cachedMsgCount" : 2,
   "cachedMsgMaxOffset" : "7",
   "cachedMsgMinOffset" : "6",
   "commitOffset" : "18446744073709551615",
   "droped" : false,
   "lastConsumeTimestamp" : "8031081608758567539",
   "lastLockTimestamp" : "0",
   "lastPullTimestamp" : "1795868318295",
   "locked" : false,
   "tryUnlockTimes" : 0
}
},"jstack":"","properties":{"PROP_CLIENT_VERSION":"V3_1_8","PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"},
"subscriptionSet":[{"subString":"*","subVersion":"1795868318273","topic":"t-run"}]}
"""


def test_a_remoting_clients_answer_is_read_into_the_same_shape() -> None:
    """MessageQueue objects as map keys (not JSON) become rows; longs sent as strings become ints."""
    info = ri.parse_remoting_running_info(CPP_ANSWER)
    (row,) = info["mqTable"]
    assert row["mq"] == {"brokerName": "broker-a", "queueId": 0, "topic": "t-run"}
    pq = row["pq"]
    assert (pq["cachedMsgCount"], pq["cachedMsgMinOffset"], pq["cachedMsgMaxOffset"]) == (2, 6, 7)
    assert pq["commitOffset"] == -1  # unsigned -1
    assert pq["lastPullTimestamp"] == 1795868318295 and pq["lastConsumeTimestamp"] == 0  # garbage: never
    assert info["properties"]["PROP_CLIENT_VERSION"] == "V3_1_8"
    assert info["subscriptionSet"][0]["topic"] == "t-run" and info["jstack"] == ""
    assert ri.parse_remoting_running_info('{"mqTable":{},"properties":{}}')["mqTable"] == []
    for bad in ("", "{", '{"a":1} x', "[1]", '{"a" 1}'):
        with pytest.raises(ValueError):
            ri.parse_remoting_running_info(bad)
