"""The transactions' put hook: TRAN_MSG=true records become half messages, everything else is left alone."""

from __future__ import annotations

from pymq.broker.delay.hook import DelayHook
from pymq.broker.put_order import default_put_hooks
from pymq.broker.put_path import PutPath
from pymq.broker.transaction.hook import HALF_TOPIC, OP_TOPIC, TransactionHook
from pymq.protocol.record import decode_properties, encode_properties, encode_record, parse_record
from pymq.protocol.transaction import TRANSACTION_PREPARED_TYPE
from tests.broker.fakes import FakeStore

TX = encode_properties({"TRAN_MSG": "true", "PGROUP": "g", "KEYS": "k1", "TAGS": "paid", "DELAY": "3"})


def rec(body: bytes, props: bytes = b"", topic: str = "orders") -> bytes:
    return encode_record(topic.encode(), body, props, sys_flag=1 | TRANSACTION_PREPARED_TYPE)


def test_plain_records_do_not_interest_the_hook() -> None:
    store = FakeStore()
    hook = TransactionHook()
    hook.install(store)  # type: ignore[arg-type]
    plain = rec(b"a") + rec(b"TRAN_MSG\x01true in a body is not searched", encode_properties({"note": "x"}))
    assert not hook.wants(plain, store.split("orders", plain))
    false = rec(b"b", encode_properties({"TRAN_MSG": "false"}))
    assert hook.wants(false, store.split("orders", false))  # the one cheap search says "maybe"
    assert hook.rewrite("orders", 2, false) == [("orders", 2, false)]  # the value decides
    assert hook.halves == 0


def test_a_transactional_record_moves_to_the_half_topic_with_its_real_topic_and_queue() -> None:
    store = FakeStore()
    path = PutPath(store, default_put_hooks([1000, 5000, 10000]))  # type: ignore[arg-type]
    assert isinstance(path.hooks[0], TransactionHook) and isinstance(path.hooks[1], DelayHook)
    before, tx, after = rec(b"before"), rec(b"tx-body", TX), rec(b"after")
    results = path.put("orders", 2, before + tx + after)
    assert [(r.topic, r.queue_id) for r in results] == [("orders", 2), (HALF_TOPIC, 0), ("orders", 2)]
    [segments] = store.calls
    assert [(t, q) for t, q, _ in segments] == [("orders", 2), (HALF_TOPIC, 0), ("orders", 2)]
    assert segments[0][2] == before and segments[2][2] == after
    half = parse_record(segments[1][2], check_crc=True)
    props = decode_properties(half.properties)
    assert half.topic == HALF_TOPIC.encode() and bytes(half.body) == b"tx-body"
    assert props["REAL_TOPIC"] == "orders" and props["REAL_QID"] == "2"
    assert props["KEYS"] == "k1" and props["TAGS"] == "paid" and props["PGROUP"] == "g"
    assert "DELAY" not in props  # a half message is never delayed (the delay hook left it alone)
    assert half.sys_flag == 1  # compression bit kept, transaction type reset (RocketMQ: TRANSACTION_NOT_TYPE)
    assert path.hooks[0].halves == 1  # type: ignore[attr-defined]


def test_records_on_the_transaction_topics_are_never_moved() -> None:
    hook = TransactionHook()
    hook.install(FakeStore())  # type: ignore[arg-type]
    for topic in (HALF_TOPIC, OP_TOPIC):
        data = rec(b"copy", TX, topic=topic)
        assert hook.rewrite(topic, 0, data) == [(topic, 0, data)]


def test_a_corrupt_transactional_record_is_left_for_the_store_to_refuse() -> None:
    hook = TransactionHook()
    hook.install(FakeStore())  # type: ignore[arg-type]
    data = bytearray(rec(b"tx-body", TX))
    data[bytes(data).index(b"tx-body")] ^= 0xFF  # a body byte: the CRC no longer matches
    assert hook.rewrite("orders", 0, bytes(data)) == [("orders", 0, bytes(data))]
