"""The pymq client SDK: producers, push and pull consumers, admin, and a synchronous facade.

asyncio first::

    from pymq.client import Message, Producer
    async with Producer("127.0.0.1:9876") as producer:
        await producer.send(Message("orders", b"hello"))

Code without an event loop uses :mod:`pymq.client.sync` (same names, blocking calls).
"""

from pymq.client.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateStrategy,
)
from pymq.client.consumer_types import ConsumeFromWhere, ConsumeOrderlyResult, ConsumeResult, MessageModel
from pymq.client.hooks import ConsumeEvent, ConsumeHook, SendEvent, SendHook
from pymq.client.producer import Producer, SendResult, SendStatus
from pymq.client.pull_consumer import PullConsumer
from pymq.client.push_consumer import PushConsumer
from pymq.client.selectors import (
    LatencyAwareSelector,
    MessageQueueSelector,
    RoundRobinSelector,
    SelectByHash,
    SelectByModulo,
    SelectByRandom,
)
from pymq.client.simple_consumer import ReceivedMessage, SimpleConsumer
from pymq.client.transaction_producer import TransactionProducer, TransactionSendResult, TransactionState
from pymq.protocol.message import Message, MessageExt
from pymq.protocol.route import MessageQueue

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateStrategy",
    "ConsumeEvent",
    "ConsumeFromWhere",
    "ConsumeHook",
    "ConsumeOrderlyResult",
    "ConsumeResult",
    "LatencyAwareSelector",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageQueueSelector",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "ReceivedMessage",
    "RoundRobinSelector",
    "SelectByHash",
    "SelectByModulo",
    "SelectByRandom",
    "SendEvent",
    "SendHook",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
]
