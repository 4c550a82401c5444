"""TransactionProducer against a scripted MockBroker: what it sends for each local outcome."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pymq.client.transaction_producer import TransactionProducer, TransactionState
from pymq.errors import LocalTransactionError, TransactionError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.message import Message
from pymq.protocol.record import decode_properties, parse_record
from pymq.protocol.transaction import PGROUP
from pymq.testing import MockBroker
from tests.helpers import wait_until

END = RequestCode.END_TRANSACTION


@pytest.fixture
async def broker() -> AsyncIterator[MockBroker]:
    async with MockBroker("broker-a") as a:
        a.add_topic("orders", [a], queues=1)
        yield a


def never(msg: object) -> TransactionState:
    raise AssertionError("no check-back here")


async def test_commit_sends_the_half_message_then_a_oneway_end_naming_it(broker: MockBroker) -> None:
    calls = []

    async def local_tx(msg: Message, arg: object) -> TransactionState:
        calls.append(arg)
        assert len(broker.requests_of(RequestCode.SEND_MESSAGE)) == 1  # the half message is stored first
        return TransactionState.COMMIT

    async with TransactionProducer(broker.address, "tx-g", never) as producer:
        result = await producer.send_in_transaction(Message("orders", b"x", properties={"a": "1"}), local_tx, 7)
        await wait_until(lambda: len(broker.requests_of(END)) == 1, what="END_TRANSACTION")
    assert calls == [7] and result.local_state is TransactionState.COMMIT
    [(_, record)] = broker.stored("orders")
    props = decode_properties(parse_record(record).properties)
    assert props["TRAN_MSG"] == "true" and props["PGROUP"] == "tx-g" and props["a"] == "1"
    [end] = broker.requests_of(END)
    assert end.is_oneway
    assert end.ext == {
        "producerGroup": "tx-g",
        "tranStateTableOffset": result.queue_offset,
        "commitLogOffset": result.commit_log_offsets[0],
        "commitOrRollback": 8,
        "fromTransactionCheck": False,
        "msgId": result.msg_id,
        "transactionId": result.msg_id,
        "topic": "orders",  # what a broker with ACL checks PUB on
    }


async def test_rollback_and_unknown(broker: MockBroker) -> None:
    async with TransactionProducer(broker.address, "tx-g", never) as producer:
        r = await producer.send_in_transaction(Message("orders", b"x"), lambda m, a: TransactionState.ROLLBACK)
        await wait_until(lambda: len(broker.requests_of(END)) == 1, what="END_TRANSACTION")
        assert broker.requests_of(END)[0].ext["commitOrRollback"] == 12 and r.local_state is TransactionState.ROLLBACK
        r = await producer.send_in_transaction(Message("orders", b"y"), lambda m, a: TransactionState.UNKNOWN)
        assert r.local_state is TransactionState.UNKNOWN
        r = await producer.send_in_transaction(Message("orders", b"z"), lambda m, a: "COMMIT_MESSAGE")  # type: ignore[arg-type,return-value]
        assert r.local_state is TransactionState.COMMIT  # RocketMQ's state names are accepted
        r = await producer.send_in_transaction(Message("orders", b"w"), lambda m, a: None)  # type: ignore[arg-type,return-value]
        assert r.local_state is TransactionState.UNKNOWN  # anything else: left to the check-back
        await wait_until(lambda: len(broker.requests_of(END)) == 2, what="the second END_TRANSACTION")
    assert [e.ext["commitOrRollback"] for e in broker.requests_of(END)] == [12, 8]  # UNKNOWN sends nothing


async def test_a_half_message_stored_without_its_durability_is_rolled_back_untouched(broker: MockBroker) -> None:
    ext = {"queueId": 0, "queueOffset": 4, "commitLogOffsets": [900]}
    broker.script(RequestCode.SEND_MESSAGE, Command.request(ResponseCode.FLUSH_DISK_TIMEOUT, ext))

    def local_tx(msg: Message, arg: object) -> TransactionState:
        raise AssertionError("the local transaction must not run")

    async with TransactionProducer(broker.address, "tx-g", never) as producer:
        r = await producer.send_in_transaction(Message("orders", b"x"), local_tx)
        await wait_until(lambda: len(broker.requests_of(END)) == 1, what="the rollback")
    assert r.local_state is TransactionState.ROLLBACK
    assert broker.requests_of(END)[0].ext["commitLogOffset"] == 900
    assert broker.requests_of(END)[0].ext["commitOrRollback"] == 12


async def test_misuse_and_failures_are_typed(broker: MockBroker) -> None:
    async with TransactionProducer(broker.address, "tx-g", never) as producer:
        with pytest.raises(TransactionError):
            await producer.send_in_transaction(Message("orders", b"x", delay_level=1), lambda m, a: None)  # type: ignore[arg-type,return-value]
        with pytest.raises(TransactionError):
            await producer.send_half(Message("orders", b"x"), transaction_timeout=0.5)

        async def boom(msg: Message, arg: object) -> TransactionState:
            raise KeyError("row")

        with pytest.raises(LocalTransactionError) as info:
            await producer.send_in_transaction(Message("orders", b"x"), boom)
        assert isinstance(info.value.__cause__, KeyError) and info.value.result.msg_id
    assert broker.requests_of(END) == []  # nothing decided, nothing sent


class _NoOpHook:
    def before_send(self, event: object) -> None:
        pass

    def after_send(self, event: object) -> None:
        pass


async def test_a_half_message_encodes_the_same_with_or_without_the_copy(broker: MockBroker) -> None:
    """The usual half message appends its marks as bytes; with a send hook (which must see the half
    message) it is a copy with the marks set: both give the same properties, in the same order."""
    messages = [
        Message("orders", b"plain"),
        Message("orders", b"full", tags="t", keys=["k1", "k2"], properties={"a": "1", "b": "2"}),
    ]
    async with TransactionProducer(broker.address, "tx-g", never) as producer:
        for msg in messages:
            await producer.send_half(msg)
            await producer.send_half(msg, transaction_timeout=30)
        producer.add_hook(_NoOpHook())  # from here on: the copy's way
        for msg in messages:
            await producer.send_half(msg)
            await producer.send_half(msg, transaction_timeout=30)
        # a message naming a mark itself takes the copy's way: the producer's value wins, where the name was
        await producer.send_half(Message("orders", b"own", properties={PGROUP: "other", "a": "1"}))

    def without_unique_key(record: bytes) -> bytes:
        props = parse_record(record).properties
        assert props.startswith(b"UNIQ_KEY\x01")
        return props[props.index(b"\x02") + 1 :]

    stored = [without_unique_key(record) for _, record in broker.stored("orders")]
    assert stored[:4] == stored[4:8]
    assert stored[1] == b"TRAN_MSG\x01true\x02PGROUP\x01tx-g\x02CHECK_IMMUNITY_TIME_IN_SECONDS\x0130\x02"
    assert stored[3].startswith(b"TAGS\x01t\x02KEYS\x01k1 k2\x02a\x011\x02b\x012\x02TRAN_MSG\x01true\x02")
    assert stored[8] == b"PGROUP\x01tx-g\x02a\x011\x02TRAN_MSG\x01true\x02"
