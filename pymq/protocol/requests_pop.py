"""Pop consumption request headers (SimpleConsumer, issue 17): POP, ACK, CHANGE_INVISIBLE_TIME, BATCH_ACK.

The pop retry topic's name (:func:`pymq.protocol.requests.pop_retry_topic`) stays with the
other topic names. Re-exported by :mod:`pymq.protocol.requests`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pymq.protocol.wire_header import I32_MAX, Header, bounded, wire_header

#: the most one POP_MESSAGE may ask for (RocketMQ's SimpleConsumer allows 1..32 per receive)
MAX_POP_MSG_NUMS = 32
#: invisible time bounds in ms (RocketMQ 5 caps it at 12 h; short ones are for tests)
MIN_INVISIBLE_MS = 100
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: POP_MESSAGE ``initMode``: where a group without an offset starts (RocketMQ's ConsumeInitMode)
POP_INIT_MIN = 0
POP_INIT_MAX = 1


@wire_header
@dataclass(slots=True, kw_only=True)
class PopMessageRequest(Header):
    """POP_MESSAGE: take up to ``max_msg_nums`` messages, invisible to the group for ``invisible_time`` ms.

    ``queue_id`` -1 lets the broker choose among the topic's queues (and the group's retry
    topic); ``poll_time`` > 0 holds the request that long (ms) when nothing is available.
    """

    consumer_group: str
    topic: str
    queue_id: int = bounded(-1, lo=-1, hi=I32_MAX)
    max_msg_nums: int = bounded(32, lo=1, hi=MAX_POP_MSG_NUMS)
    invisible_time: int = bounded(lo=MIN_INVISIBLE_MS, hi=MAX_INVISIBLE_MS)
    poll_time: int = bounded(0, lo=0, hi=I32_MAX)
    born_time: int = 0
    init_mode: int = bounded(POP_INIT_MIN, lo=POP_INIT_MIN, hi=POP_INIT_MAX)
    #: tag expression (``*`` or ``a || b``)
    exp: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class PopMessageResponse(Header):
    """The popped messages are the body (stored records); one receipt handle per record, space-separated."""

    pop_time: int
    invisible_time: int
    receipt_handles: str = ""


@wire_header
@dataclass(slots=True, kw_only=True)
class AckMessageRequest(Header):
    """ACK_MESSAGE: ``extra_info`` is the receipt handle (verified by the broker; group must match)."""

    consumer_group: str
    topic: str
    extra_info: str


@wire_header
@dataclass(slots=True, kw_only=True)
class ChangeInvisibleTimeRequest(Header):
    """CHANGE_MESSAGE_INVISIBLETIME: the message stays invisible for ``invisible_time`` ms from now."""

    consumer_group: str
    topic: str
    extra_info: str
    invisible_time: int = bounded(lo=MIN_INVISIBLE_MS, hi=MAX_INVISIBLE_MS)


@wire_header
@dataclass(slots=True, kw_only=True)
class ChangeInvisibleTimeResponse(Header):
    """The message's new receipt handle (the old one no longer acks)."""

    pop_time: int
    invisible_time: int
    extra_info: str


#: the most receipt handles one BATCH_ACK_MESSAGE may carry
MAX_BATCH_ACK = 1024


@wire_header
@dataclass(slots=True, kw_only=True)
class BatchAckRequest(Header):
    """BATCH_ACK_MESSAGE: the body is ``{"receiptHandles": [...]}`` (msgpack); the answer's body is
    ``{"codes": [...], "remarks": [...]}``, one per handle in order (SUCCESS or INVALID_RECEIPT_HANDLE)."""

    consumer_group: str
    topic: str
