"""Client pieces without sockets: process queue offsets, local offset file, encoding, pulled records."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from pymq.client.offset_store import LocalOffsetStore
from pymq.client.process_queue import ProcessQueue
from pymq.client.producer import Producer
from pymq.client.pull_api import decode_pulled
from pymq.client.pull_consumer import PullConsumer
from pymq.client.push_consumer import PushConsumer
from pymq.errors import ClientError, MessageTooLargeError
from pymq.protocol.filter import Subscription
from pymq.protocol.message import Message, MessageExt, UniqueIdGenerator, decode_message
from pymq.protocol.record import SYSFLAG_COMPRESSED, encode_properties, encode_record, parse_record
from pymq.protocol.route import MessageQueue


def ext(offset: int, body: bytes = b"x") -> MessageExt:
    rec = encode_record(b"T", body, b"", queue_offset=offset)
    return decode_message(rec)


def test_commit_offset_is_smallest_in_flight() -> None:
    """The commit offset is the smallest offset still in flight, or max + 1 when none is."""
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(10, 15)]
    pq.add(msgs)
    assert pq.count == 5 and pq.span == 4
    assert pq.remove([msgs[1], msgs[2]]) == 10
    assert pq.remove([msgs[0]]) == 13
    assert pq.remove([msgs[3], msgs[4]]) == 15
    assert pq.count == 0 and pq.size == 0


def test_process_queue_ignores_duplicates_and_orders() -> None:
    """Adding a message twice keeps one copy; take_in_order returns the lowest offsets first."""
    pq = ProcessQueue()
    pq.add([ext(3), ext(1), ext(2)])
    pq.add([ext(2)])
    assert pq.count == 3
    assert [m.queue_offset for m in pq.take_in_order(2)] == [1, 2]


async def test_local_offset_store_round_trip(tmp_path: Path) -> None:
    """Broadcast offsets are written atomically and read back by a new store."""
    mq = MessageQueue("T", "broker-a", 3)
    store = LocalOffsetStore(tmp_path, "1.2.3.4@x", "g")
    store.update(mq, 42)
    await store.persist([mq])
    store.update(mq, 43)
    await store.persist([mq])
    again = LocalOffsetStore(tmp_path, "1.2.3.4@x", "g")
    await again.load()
    assert await again.read(mq) == 43
    assert (tmp_path / "1.2.3.4@x" / "g" / "offsets.json.bak").exists()


async def test_local_offset_store_falls_back_to_backup(tmp_path: Path) -> None:
    """A corrupt offsets.json falls back to the .bak copy."""
    mq = MessageQueue("T", "b", 0)
    store = LocalOffsetStore(tmp_path, "c", "g")
    store.update(mq, 7)
    await store.persist([mq])
    store.update(mq, 8)
    await store.persist([mq])
    store.path.write_text("{not json")
    again = LocalOffsetStore(tmp_path, "c", "g")
    await again.load()
    assert await again.read(mq) == 7


def producer() -> Producer:
    p = Producer("127.0.0.1:9876", compress_threshold=100, max_message_size=10_000)
    p._ids = UniqueIdGenerator("10.0.0.1")
    return p


def test_producer_encodes_properties_and_compresses() -> None:
    """Tags, keys, delay and user properties are encoded; a body over the threshold is zlib-compressed."""
    body = b"a" * 5000
    rec, uniq = producer()._encode(
        Message("T", body, tags="t1", keys=["k1", "k2"], properties={"x": "y"}, delay_level=2)
    )
    r = parse_record(rec, check_crc=True)
    assert r.sys_flag & SYSFLAG_COMPRESSED and zlib.decompress(bytes(r.body)) == body
    m = decode_message(rec)
    assert m.body == body and m.tags == "t1" and m.keys == ["k1", "k2"] and m.msg_id == uniq
    assert m.properties["x"] == "y" and m.delay_level == 2


def test_producer_rejects_bad_messages() -> None:
    """Empty bodies, oversized bodies and reserved bytes in properties are refused before sending."""
    p = producer()
    with pytest.raises(ClientError):
        p._check(Message("T", b""))
    with pytest.raises(MessageTooLargeError):
        p._check(Message("T", b"x" * 20_000))
    with pytest.raises(ClientError):
        p._encode(Message("T", b"x", tags="bad\x01tag"))


def test_decode_pulled_filters_tags_and_restores_retry_topic() -> None:
    """Pulled records whose tag does not match are dropped; retry-topic messages show their original topic."""
    recs = b"".join(
        encode_record(b"%RETRY%g", b"m", encode_properties({"TAGS": t, "RETRY_TOPIC": "orders"})) for t in "ABA"
    )
    mq = MessageQueue("%RETRY%g", "broker-a", 0)
    msgs = decode_pulled(recs, mq, Subscription.parse(mq.topic, "A"))
    assert [m.tags for m in msgs] == ["A", "A"] and {m.topic for m in msgs} == {"orders"}
    assert {m.broker_name for m in msgs} == {"broker-a"}


@pytest.mark.parametrize("size", [0, 1025])
def test_pull_batch_size_out_of_range_is_refused_up_front(size: int) -> None:
    """As RocketMQ's checkConfig: a batch size the broker would refuse on every pull fails at construction."""
    from pymq.client import PushConsumer

    with pytest.raises(ClientError, match="pull_batch_size must be between 1 and 1024"):
        PushConsumer("127.0.0.1:9876", "g", pull_batch_size=size)


@pytest.mark.parametrize("expression", ["a,b", "created paid", "a ||", "a | b", "|| b"])
@pytest.mark.parametrize("kind", [PushConsumer, PullConsumer])
def test_subscribe_rejects_tag_expressions_that_match_nothing(
    kind: type[PushConsumer | PullConsumer], expression: str
) -> None:
    """The CLI's strict parser: an expression the broker would take as one unknown tag is refused."""
    consumer = kind("127.0.0.1:9876", "g")
    with pytest.raises(ClientError, match="not a tag expression"):
        consumer.subscribe("orders", expression)
    assert consumer.subscriptions == {}


@pytest.mark.parametrize("expression", ["*", "", "  created  ", "created || paid", "a||b||*"])
def test_subscribe_accepts_tag_expressions(expression: str) -> None:
    consumer = PullConsumer("127.0.0.1:9876", "g")
    consumer.subscribe("orders", expression)
    sub, expected = consumer.subscriptions["orders"], Subscription.parse("orders", expression)
    assert (sub.expression, sub.tags) == (expected.expression, expected.tags)
