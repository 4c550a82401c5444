"""Checked by mypy (tests/client/test_sync_facade_types.py), never run: the facade's results are typed."""

from __future__ import annotations

from typing import assert_type

from pymq.client import PullConsumer as AsyncPullConsumer
from pymq.client.sync import Message, MessageExt, MessageQueue, Producer, PullConsumer, PushConsumer, SendResult


def blocking_calls() -> None:
    with Producer("127.0.0.1:9876") as producer:
        assert_type(producer, Producer)
        assert_type(producer.send(Message("t", b"x"), timeout=1.0), SendResult)
        assert_type(producer.send_batch([Message("t", b"x")]), SendResult)
        assert_type(producer.queues_for("t"), list[MessageQueue])
        producer.send("not a message")  # type: ignore[arg-type]
    consumer = PullConsumer("127.0.0.1:9876", "g")
    consumer.subscribe("t", "*")
    with consumer as c:
        assert_type(c, PullConsumer)
        assert_type(consumer.poll(timeout=1.0), list[MessageExt])
        assert_type(consumer.committed(MessageQueue("t", "b", 0)), int)
        assert_type(consumer.assigned_queues(), list[MessageQueue])
        for msg in consumer:
            assert_type(msg, MessageExt)
        for batch in consumer.batches():
            assert_type(batch, list[MessageExt])
    push = PushConsumer("127.0.0.1:9876", "g")
    push.subscribe("t")
    push.register_listener(lambda msgs: None)


async def async_iteration() -> None:
    consumer = AsyncPullConsumer("127.0.0.1:9876", "g")
    async for msg in consumer:
        assert_type(msg, MessageExt)
    async for batch in consumer.batches():
        assert_type(batch, list[MessageExt])


def transactional_calls() -> None:
    from pymq.client.sync import TransactionProducer, TransactionSendResult, TransactionState

    def local_tx(msg: Message, arg: object) -> TransactionState:
        return TransactionState.COMMIT

    def checker(msg: MessageExt) -> TransactionState:
        return TransactionState.ROLLBACK

    with TransactionProducer("127.0.0.1:9876", "g", checker) as producer:
        assert_type(producer, TransactionProducer)
        result = producer.send_in_transaction(Message("t", b"x"), local_tx, 1, transaction_timeout=30)
        assert_type(result, TransactionSendResult)
        assert_type(result.local_state, TransactionState)
        assert_type(producer.send_half(Message("t", b"x")), SendResult)
        producer.end_transaction(producer.send_half(Message("t", b"x")), TransactionState.COMMIT)
