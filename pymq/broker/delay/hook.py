"""Delay levels at put time: a record with ``DELAY=L`` is stored in the schedule topic instead.

As RocketMQ does, the record is re-encoded for ``SCHEDULE_TOPIC_XXXX``, queue ``L - 1``
(``L`` capped at the number of levels), with its real topic and queue in the
``REAL_TOPIC``/``REAL_QID`` properties; :mod:`pymq.broker.delay.service` moves it back when due.
The schedule topic's consume-queue tags code is the delivery time in ms (store time +
the level's delay): this hook registers that rule with the store's dispatcher, so the live
path, recovery and replication all build the same entries.

Records the store would refuse (bad lengths or CRC, another topic, too big) are left
alone for the store to refuse, as are records whose level is not a positive number and
records already on the schedule topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.broker.put_path import Segment, movable_record, move_records
from pymq.broker.system_topics import SCHEDULE_TOPIC
from pymq.protocol.message import Prop
from pymq.protocol.record import (
    decode_properties,
    encode_properties,
    find_property,
    reencode,
)
from pymq.protocol.record_batch import SplitBatch, any_property_contains

if TYPE_CHECKING:
    from pymq.broker.store import MessageStore

_DELAY = b"DELAY\x01"


def delivery_time(store_ts: int, level: int, delay_levels_ms: list[int]) -> int:
    """When a message stored at ``store_ts`` with delay ``level`` is due (the schedule queue's tags code)."""
    return store_ts + delay_levels_ms[min(max(level, 1), len(delay_levels_ms)) - 1]


class DelayHook:
    """The put hook that redirects records with a delay level to the schedule topic."""

    def __init__(self, delay_levels_ms: list[int]) -> None:
        self.delay_levels_ms = delay_levels_ms
        self.max_message_size = 0

    def install(self, store: MessageStore) -> None:
        self.max_message_size = store.max_message_size
        store.set_tags_rule(SCHEDULE_TOPIC, self.tags_code)

    def tags_code(self, props: bytes, store_ts: int) -> int:
        """The schedule topic's tags code: the delivery time (level from ``DELAY``, 1 if unreadable)."""
        raw = find_property(props, _DELAY) if props else None
        try:
            level = int(raw or b"1")
        except ValueError:
            level = 1
        return delivery_time(store_ts, level, self.delay_levels_ms)

    #: ``wants`` is exactly "a record's properties contain this" (the put path scans once for all hooks)
    property_needles = (_DELAY,)

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        return any_property_contains(data, split, _DELAY)

    def rewrite(self, topic: str, queue_id: int, data: bytes) -> list[Segment]:
        if topic == SCHEDULE_TOPIC:
            return [(topic, queue_id, data)]
        topic_b = topic.encode()
        return move_records(
            topic, queue_id, data, lambda pos, size: self._delayed(data, pos, size, topic, topic_b, queue_id)
        )

    def _delayed(self, data: bytes, pos: int, size: int, topic: str, topic_b: bytes, queue_id: int) -> Segment | None:
        """The schedule-topic segment for the record at ``pos``, or None to leave it alone."""
        if _DELAY not in data[pos : pos + size]:
            return None
        r = movable_record(data, pos, size, topic_b, self.max_message_size)
        if r is None:
            return None
        raw = find_property(r.properties, _DELAY)
        try:
            level = int(raw or b"0")
        except ValueError:
            return None
        if level <= 0:
            return None
        level = min(level, len(self.delay_levels_ms))
        p = decode_properties(r.properties)
        p[Prop.REAL_TOPIC] = topic
        p[Prop.REAL_QID] = str(queue_id)
        p[Prop.DELAY] = str(level)
        rec = reencode(r, SCHEDULE_TOPIC.encode(), encode_properties(p))
        if len(rec) > self.max_message_size:
            return None
        return SCHEDULE_TOPIC, level - 1, rec


__all__ = ["SCHEDULE_TOPIC", "DelayHook", "delivery_time"]
