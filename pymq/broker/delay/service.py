"""Delay levels: moving scheduled messages to their real topic when they fall due.

A message with delay level L is stored (by the put hook in :mod:`pymq.broker.delay.hook`)
in ``SCHEDULE_TOPIC_XXXX``, queue L-1, with its real topic and queue in REAL_TOPIC/REAL_QID.
One task per level walks that queue in order (every message of a level has the same delay, so due times only grow),
waits until the head is due (store time + the level's delay), re-stores it on the real
topic without the delay property, and moves on. Progress per level is persisted in
``config/delayOffset.json``; after a restart delivery resumes there, so nothing scheduled
is lost (a message delivered just before a crash may be delivered twice). Only masters
deliver.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.delay.hook import SCHEDULE_TOPIC
from pymq.broker.store.config_files import read_json, write_json_atomic
from pymq.broker.store.results import GetStatus, PutStatus
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.logs import get_logger
from pymq.protocol.message import Prop
from pymq.protocol.record import decode_properties, encode_properties, iter_spans, parse_record, reencode
from pymq.tasks import cancel_all, wait_within
from pymq.transport.periodic import every

if TYPE_CHECKING:
    from pymq.broker.hosts import DeliveryHost as ScheduleHost


log = get_logger("broker.schedule")

PERSIST_INTERVAL = 1.0
RETRY_DELAY = 1.0
BATCH = 32


class ScheduleService:
    def __init__(self, app: ScheduleHost, clock: Clock = SYSTEM_CLOCK) -> None:
        self.app = app
        #: when messages fall due and how long to wait for them (a FakeClock in tests)
        self.clock = clock
        self.delays_ms = app.config.store.delay_levels_ms
        self.path = Path(app.config.store.store_dir) / "config" / "delayOffset.json"
        #: delay level (1-based) -> next offset to deliver in queue level-1
        self.offsets: dict[int, int] = {}
        self._wakeups: dict[int, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._dirty = False
        self._started = False
        self.delivered = 0

    async def start(self) -> None:
        self._started = True
        data = read_json(self.path) or {}
        for level, off in (data.get("offsetTable") or {}).items():
            self.offsets[int(level)] = int(off)
        store = self.app.store
        assert store is not None
        # only the schedule topic's arrivals (the store asks once per topic)
        store.add_arrival_listener(self._on_arrival, SCHEDULE_TOPIC.__eq__)
        for level in range(1, len(self.delays_ms) + 1):
            self._wakeups[level] = asyncio.Event()
            self._tasks.append(asyncio.ensure_future(self._deliver_level(level)))
        self._tasks.append(asyncio.ensure_future(every(PERSIST_INTERVAL, self._persist_if_dirty)))

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        store = self.app.store
        if store is not None:
            # A broker that stops being master stops the service; a later start adds it back.
            store.remove_arrival_listener(self._on_arrival)
        if self._started:
            self._started = False
            self.persist()

    def persist(self) -> None:
        self._dirty = False
        write_json_atomic(self.path, {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}})

    def _persist_if_dirty(self) -> None:
        if self._dirty:
            self.persist()

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == SCHEDULE_TOPIC:
            ev = self._wakeups.get(queue_id + 1)
            if ev is not None:
                ev.set()

    async def _deliver_level(self, level: int) -> None:
        store = self.app.store
        assert store is not None
        delay = self.delays_ms[level - 1]
        wake = self._wakeups[level]
        qid = level - 1
        while True:
            offset = self.offsets.get(level, 0)
            result = store.get_messages("SCHEDULE", SCHEDULE_TOPIC, qid, offset, BATCH)
            if result.status == GetStatus.OFFSET_TOO_SMALL:
                self._advance(level, result.next_begin_offset)
                continue
            if result.status != GetStatus.FOUND:
                if result.status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
                    self._advance(level, result.next_begin_offset)
                    continue
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await wait_within(wake.wait(), 1.0)
                continue
            records = [parse_record(buf, pos) for buf in result.buffers for pos, _size in iter_spans(buf)]
            for r in records:
                now = self.clock.time_ms()
                due = r.store_timestamp + delay
                if due > now + delay:
                    due = now  # the clock went back by more than a delay: deliver now
                if due > now:
                    await self.clock.sleep((due - now) / 1000)
                while not self._deliver(r):
                    await self.clock.sleep(RETRY_DELAY)
                self._advance(level, r.queue_offset + 1)

    def _advance(self, level: int, offset: int) -> None:
        if self.offsets.get(level, 0) < offset:
            self.offsets[level] = offset
            self._dirty = True

    def _deliver(self, r) -> bool:  # type: ignore[no-untyped-def]
        """Store one due message on its real topic; False to try again later."""
        app = self.app
        store = app.store
        assert store is not None
        props = decode_properties(r.properties)
        topic = props.pop(Prop.REAL_TOPIC, None)
        qid_raw = props.pop(Prop.REAL_QID, "0")
        props.pop(Prop.DELAY, None)
        if not topic:
            log.warning("scheduled_message_without_real_topic", offset=r.physical_offset)
            return True
        tc = app.topics.get(topic)
        if tc is None:
            log.warning("scheduled_message_topic_gone", topic=topic, offset=r.physical_offset)
            return True
        queue_id = int(qid_raw) if qid_raw.isdigit() else 0
        if queue_id >= tc.writeQueueNums:
            queue_id %= tc.writeQueueNums
        record = reencode(r, topic.encode(), encode_properties(props))
        res = app.put_path.put(topic, queue_id, record)[0]
        if res.status != PutStatus.PUT_OK:
            log.warning("scheduled_delivery_failed", topic=topic, status=res.status.name, reason=res.reason)
            return False
        app.stats.record_put(topic, [res])
        self.delivered += 1
        return True
