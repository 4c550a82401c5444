"""Half messages at put time: a record with ``TRAN_MSG=true`` is stored in the half topic instead.

As RocketMQ's TransactionalMessageBridge does, the record is re-encoded for
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real topic and queue in the
``REAL_TOPIC``/``REAL_QID`` properties and its sys flag's transaction bits cleared (as RocketMQ does);
no consumer subscribes to that topic, so the message stays invisible until
:mod:`pymq.broker.transaction.service` commits it (re-stores it on its real topic) or rolls it
back. Transactional messages are never delayed: ``DELAY`` and the timer and merge properties
are dropped here (this hook runs first on the put path, so the timer hook never sees them).

The hook is the only cost plain sends pay for transactions: ``wants`` is one substring
search of each record's properties for ``TRAN_MSG\\x01`` (the put path's pattern).
Records the store would refuse are left alone for it to refuse; records already on the
transactions' own topics are never moved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.broker.put_path import Segment, movable_record, move_records, move_valid_records
from pymq.protocol.message import Prop
from pymq.protocol.record import find_property
from pymq.protocol.record_batch import SplitBatch, any_property_contains
from pymq.protocol.record_edit import moved_record, property_bytes, property_keys, strip_properties
from pymq.protocol.transaction import TRANSACTION_NOT_TYPE

if TYPE_CHECKING:
    from pymq.broker.store import MessageStore

#: where half messages wait for their outcome (one queue)
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: the op log: one record per resolved half message (body: its first half-queue offset, tags "d")
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: where half messages go when their check-backs are used up (one queue, readable)
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRANSACTION_TOPICS = frozenset({HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC})

_TRAN = b"TRAN_MSG\x01"
#: on put-back copies: the half-queue offset of the message's first copy, its *origin*
#: (RocketMQ's PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, which it sets on its immunity copies).
#: The broker's own: a producer's value is dropped (it would make its half message stand for,
#: and its rollback resolve, another producer's)
ORIGIN_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
#: properties that would delay a message: a transactional one is never delayed (as in RocketMQ)
_NEVER_DELAYED = (
    Prop.DELAY,
    Prop.TIMER_DELIVER_MS,
    Prop.TIMER_DELAY_MS,
    Prop.TIMER_DELAY_SEC,
    Prop.MERGE_KEY,
    Prop.MERGE_WINDOW_MS,
)
#: what a half message's properties lose: what would delay it, and what the broker sets itself
_DROPPED = property_keys(*_NEVER_DELAYED, ORIGIN_OFFSET, Prop.REAL_TOPIC, Prop.REAL_QID)
_HALF_TOPIC_B = HALF_TOPIC.encode()


class TransactionHook:
    """The put hook that turns ``TRAN_MSG=true`` records into half messages."""

    def __init__(self) -> None:
        self.max_message_size = 0
        #: half messages moved to the half topic (the store may still refuse one)
        self.halves = 0
        #: (topic, queue id) -> its REAL_TOPIC and REAL_QID properties, encoded (a bounded cache)
        self._real: dict[tuple[str, int], bytes] = {}

    def install(self, store: MessageStore) -> None:
        self.max_message_size = store.max_message_size

    #: ``wants`` is exactly "a record's properties contain this" (the put path scans once for all hooks)
    property_needles = (_TRAN,)
    #: a half message is final: never delayed (what would delay it is stripped), and the half
    #: topic is no priority topic, so the later hooks are not asked (see PutHook)
    settled_topics = (HALF_TOPIC,)

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        return any_property_contains(data, split, _TRAN)

    def rewrite(self, topic: str, queue_id: int, data: bytes) -> list[Segment]:
        if topic in TRANSACTION_TOPICS:
            return [(topic, queue_id, data)]
        topic_b = topic.encode()
        return move_records(
            topic, queue_id, data, lambda pos, size: self._checked_half(data, pos, size, topic, topic_b, queue_id)
        )

    def rewrite_split(self, topic: str, queue_id: int, data: bytes, split: SplitBatch) -> list[Segment]:
        """:meth:`rewrite` of a batch the store split (its valid records are not parsed again)."""
        if topic in TRANSACTION_TOPICS:
            return [(topic, queue_id, data)]
        return move_valid_records(
            topic,
            queue_id,
            data,
            split,
            lambda pos, size, props_at: self._half(data, pos, data[props_at : pos + size], topic, queue_id),
        )

    def _checked_half(
        self, data: bytes, pos: int, size: int, topic: str, topic_b: bytes, queue_id: int
    ) -> Segment | None:
        """:meth:`_half` of the record at ``pos`` if it is one the store would take, else None."""
        if _TRAN not in data[pos : pos + size]:
            return None
        r = movable_record(data, pos, size, topic_b, self.max_message_size)
        return None if r is None else self._half(data, pos, r.properties, topic, queue_id)

    def _half(self, data: bytes, pos: int, props: bytes, topic: str, queue_id: int) -> Segment | None:
        """The half-topic segment for the valid record at ``pos`` (its properties ``props``), or None
        to leave it alone."""
        if find_property(props, _TRAN) != b"true":
            return None
        # The properties edited as bytes (no decode and re-encode): what must not stay removed
        # (one search per name when, as usual, none is there), the real topic and queue appended.
        real = self._real.get((topic, queue_id))
        if real is None:
            if len(self._real) >= 4096:
                self._real.clear()
            real = self._real[topic, queue_id] = property_bytes(Prop.REAL_TOPIC, topic) + property_bytes(
                Prop.REAL_QID, str(queue_id)
            )
        props = strip_properties(props, _DROPPED) + real
        rec = moved_record(data, pos, _HALF_TOPIC_B, props, tx_type=TRANSACTION_NOT_TYPE)
        if len(rec) > self.max_message_size:
            return None
        self.halves += 1
        return HALF_TOPIC, 0, rec


__all__ = ["CHECK_MAX_TOPIC", "HALF_TOPIC", "OP_TOPIC", "ORIGIN_OFFSET", "TRANSACTION_TOPICS", "TransactionHook"]
