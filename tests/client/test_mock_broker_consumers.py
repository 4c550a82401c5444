"""Push consumers against a MockBroker: rebalance, pull, listener, offsets and send-back without a real broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import pymq.client.consumer_base as consumer_base
from pymq.client import broker_api
from pymq.client.consumer_types import ConsumeFromWhere, ConsumeResult
from pymq.client.producer import Producer
from pymq.client.push_consumer import PushConsumer
from pymq.protocol.codes import RequestCode
from pymq.protocol.message import Message, MessageExt
from pymq.protocol.route import MessageQueue
from pymq.testing import MockBroker


@pytest.fixture
async def broker() -> AsyncIterator[MockBroker]:
    async with MockBroker("broker-a") as a:
        a.add_topic("orders", [a], queues=2)
        yield a


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def consumer(broker: MockBroker, tmp_path: Path, **kw: object) -> PushConsumer:
    c = PushConsumer(
        broker.address,
        "g",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        offset_store_dir=tmp_path,
        **kw,  # type: ignore[arg-type]
    )
    c.subscribe("orders")
    return c


async def test_push_consumer_consumes_everything_and_commits(broker: MockBroker, tmp_path: Path) -> None:
    async with Producer(broker.address) as p:
        for i in range(6):
            await p.send(Message("orders", f"m{i}".encode()))
    seen: list[bytes] = []
    c = consumer(broker, tmp_path)

    @c.listener
    async def on(msgs: list[MessageExt]) -> ConsumeResult:
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    async with c:
        await until(lambda: len(seen) == 6)
        assert [mq.queueId for mq in c.assigned_queues()] == [0, 1]  # the only member owns both queues
    assert sorted(seen) == [f"m{i}".encode() for i in range(6)]
    committed = {k: v for k, v in broker.offsets.items() if k[0] == "g"}
    assert sum(committed.values()) == 6  # each queue committed past its last message


async def test_failed_messages_are_sent_back(broker: MockBroker, tmp_path: Path) -> None:
    async with Producer(broker.address) as p:
        await p.send(Message("orders", b"bad"))
    c = consumer(broker, tmp_path)
    c.register_listener(lambda msgs: ConsumeResult.RECONSUME_LATER)
    async with c:
        await until(lambda: len(broker.sent_back) == 1)
    assert broker.sent_back[0]["group"] == "g" and broker.sent_back[0]["originTopic"] == "orders"


async def test_orderly_consumer_takes_only_locked_queues(broker: MockBroker, tmp_path: Path) -> None:
    broker.locks[("g", MessageQueue("orders", "broker-a", 1))] = "someone-else"  # held by another member
    c = consumer(broker, tmp_path)
    c.register_orderly_listener(lambda msgs: None)
    async with c:
        assert [mq.queueId for mq in c.assigned_queues()] == [0]


async def test_pulls_are_sized_by_bytes(broker: MockBroker, tmp_path: Path) -> None:
    """A consumer asks for pull_batch_bytes of records and up to 1024 messages; pull_batch_size caps the count."""
    async with Producer(broker.address) as p:
        for i in range(12):
            await p.send(
                Message("orders", bytes([i]) * 1000),
            )
    seen: list[int] = []
    batches: list[int] = []
    c = consumer(broker, tmp_path, pull_batch_bytes=2500, consume_batch_max_size=32)

    @c.listener
    async def on(msgs: list[MessageExt]) -> None:
        batches.append(len(msgs))
        seen.extend(m.body[0] for m in msgs)

    async with c:
        await until(lambda: len(seen) == 12)
    pulls = [r.ext for r in broker.requests_of(RequestCode.PULL_MESSAGE)]
    assert {(e["maxMsgNums"], e["maxMsgBytes"]) for e in pulls} == {(1024, 2500)}
    assert sorted(seen) == list(range(12)) and max(batches) == 2  # a record is > 1000 bytes: two fit
    broker.requests.clear()

    c = PushConsumer(broker.address, "g2", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, pull_batch_size=3)
    c.subscribe("orders")
    got: list[MessageExt] = []
    c.register_listener(lambda msgs: got.extend(msgs))
    async with c:
        await until(lambda: len(got) == 12)
    pulls = [r.ext for r in broker.requests_of(RequestCode.PULL_MESSAGE)]
    assert {(e["maxMsgNums"], e["maxMsgBytes"]) for e in pulls} == {(3, 256 * 1024)}


async def test_next_pull_is_sent_before_an_answer_is_decoded(
    broker: MockBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push consumer keeps one pull in flight: the pull for the next offset is sent before this answer is decoded."""
    broker.add_topic("single", [broker], queues=1)
    async with Producer(broker.address) as p:
        for i in range(6):
            await p.send(Message("single", f"m{i}".encode()))
    events: list[tuple[str, int]] = []
    build, decode = broker_api.pull_message, consumer_base.decode_pulled

    def pull_message(group: str, mq: MessageQueue, offset: int, **kw: Any) -> Any:
        if mq.topic == "single":
            events.append(("pull", offset))
        return build(group, mq, offset, **kw)

    def decode_pulled(body: Any, mq: MessageQueue, sub: Any) -> list[MessageExt]:
        msgs = decode(body, mq, sub)
        events.append(("decode", msgs[0].queue_offset))
        return msgs

    monkeypatch.setattr(broker_api, "pull_message", pull_message)
    monkeypatch.setattr(consumer_base, "decode_pulled", decode_pulled)
    seen: list[bytes] = []
    c = PushConsumer(
        broker.address,
        "g",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        offset_store_dir=tmp_path,
        pull_batch_size=2,
    )
    c.subscribe("single")
    c.register_listener(lambda msgs: seen.extend(m.body for m in msgs))
    async with c:
        await until(lambda: len(seen) == 6)
    assert sorted(seen) == [f"m{i}".encode() for i in range(6)]
    # pull 0, pull 2 (ahead), decode 0, pull 4, decode 2, pull 6 (long-polls), decode 4
    assert events[:7] == [
        ("pull", 0),
        ("pull", 2),
        ("decode", 0),
        ("pull", 4),
        ("decode", 2),
        ("pull", 6),
        ("decode", 4),
    ]
