"""Timer messages at put time: a record with a timer property is stored in the timer topic instead.

As RocketMQ 5 does, a record carrying ``TIMER_DELIVER_MS`` (absolute, ms), ``TIMER_DELAY_MS``
or ``TIMER_DELAY_SEC`` is re-encoded for ``rmq_sys_wheel_timer`` with its real topic and
queue in ``REAL_TOPIC``/``REAL_QID`` and the delivery time in ``TIMER_OUT_MS``; the timer
service (:mod:`pymq.broker.timer.service`) files it in the TimerWheel and puts it back on its
real topic when due. A merged-delay record (``MERGE_KEY`` + ``MERGE_WINDOW_MS``, pymq's own)
goes the same way with ``TIMER_OUT_MS`` = now + window, into queue 1 of the timer topic
(plain timers use queue 0), so filing plain timers never reads the commitlog.

The timer topic's consume-queue tags code is ``TIMER_OUT_MS``: the enqueuer learns each
message's delivery time from the consume queue alone. A delivery time in the past means
now; beyond now + ``timer_max_delay_ms`` the whole request is refused with MESSAGE_ILLEGAL
and a remark naming the limit (:class:`~pymq.broker.put_path.PutRefused`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.broker.put_path import PutRefused, Segment, movable_record, move_records
from pymq.broker.store.results import PutStatus
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

TIMER_TOPIC = "rmq_sys_wheel_timer"
#: timer topic queues: plain timers, merged-delay messages
PLAIN_QUEUE = 0
MERGE_QUEUE = 1
#: every property this hook or the service reads; removed before delivery
TIMER_PROPERTIES = (
    Prop.TIMER_DELIVER_MS,
    Prop.TIMER_DELAY_MS,
    Prop.TIMER_DELAY_SEC,
    Prop.TIMER_OUT_MS,
    Prop.MERGE_WINDOW_MS,
)
_NEEDLE = b"TIMER_"
_MERGE_NEEDLE = b"MERGE_WINDOW_MS\x01"
_OUT = b"TIMER_OUT_MS\x01"


def _int(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def delivery_time(props: dict[str, str], now_ms: int) -> int | None:
    """When a message with these properties is due (None: not a timer message; a bad value is None too)."""
    window = _int(props.get(Prop.MERGE_WINDOW_MS))
    if window is not None and props.get(Prop.MERGE_KEY):
        return now_ms + max(window, 0)
    at = _int(props.get(Prop.TIMER_DELIVER_MS))
    if at is not None:
        return at
    ms = _int(props.get(Prop.TIMER_DELAY_MS))
    if ms is not None:
        return now_ms + ms
    sec = _int(props.get(Prop.TIMER_DELAY_SEC))
    if sec is not None:
        return now_ms + sec * 1000
    return None


class TimerHook:
    """The put hook that moves timer and merged-delay records to :data:`TIMER_TOPIC`."""

    def __init__(self, max_delay_ms: int, now_ms: Callable[[], int]) -> None:
        self.max_delay_ms = max_delay_ms
        self.now_ms = now_ms
        self.max_message_size = 0

    def install(self, store: MessageStore) -> None:
        self.max_message_size = store.max_message_size
        store.set_tags_rule(TIMER_TOPIC, self.tags_code)

    @staticmethod
    def tags_code(props: bytes, store_ts: int) -> int:
        """The timer topic's tags code: ``TIMER_OUT_MS`` (the store time if unreadable)."""
        raw = find_property(props, _OUT) if props else None
        try:
            return int(raw) if raw else store_ts
        except ValueError:
            return store_ts

    #: ``wants`` is exactly "a record's properties contain one of these" (the put path scans once for all hooks)
    property_needles = (_NEEDLE, _MERGE_NEEDLE)

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        return any_property_contains(data, split, _NEEDLE) or any_property_contains(data, split, _MERGE_NEEDLE)

    def rewrite(self, topic: str, queue_id: int, data: bytes) -> list[Segment]:
        if topic == TIMER_TOPIC:
            return [(topic, queue_id, data)]
        topic_b = topic.encode()
        now = self.now_ms()
        return move_records(
            topic, queue_id, data, lambda pos, size: self._timed(data, pos, size, topic, topic_b, queue_id, now)
        )

    def _timed(
        self, data: bytes, pos: int, size: int, topic: str, topic_b: bytes, queue_id: int, now: int
    ) -> Segment | None:
        """The timer-topic segment for the record at ``pos``, or None to leave it alone."""
        chunk = data[pos : pos + size]
        if _NEEDLE not in chunk and _MERGE_NEEDLE not in chunk:
            return None
        r = movable_record(data, pos, size, topic_b, self.max_message_size)
        if r is None:
            return None
        p = decode_properties(r.properties)
        due = delivery_time(p, now)
        if due is None:
            return None
        if due - now > self.max_delay_ms:
            raise PutRefused(
                PutStatus.MESSAGE_ILLEGAL,
                f"timer message illegal: delivery in {due - now} ms is beyond the maximum delay "
                f"{self.max_delay_ms} ms (timer_max_delay_ms)",
            )
        merge = bool(p.get(Prop.MERGE_KEY)) and Prop.MERGE_WINDOW_MS in p
        p[Prop.REAL_TOPIC] = topic
        p[Prop.REAL_QID] = str(queue_id)
        p[Prop.TIMER_OUT_MS] = str(max(due, now))
        p.pop(Prop.DELAY, None)  # a timer wins over a delay level
        rec = reencode(r, TIMER_TOPIC.encode(), encode_properties(p))
        if len(rec) > self.max_message_size:
            return None
        return TIMER_TOPIC, MERGE_QUEUE if merge else PLAIN_QUEUE, rec


__all__ = ["MERGE_QUEUE", "PLAIN_QUEUE", "TIMER_PROPERTIES", "TIMER_TOPIC", "TimerHook", "delivery_time"]
