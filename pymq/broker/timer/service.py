"""The timer service: files timer messages in the TimerWheel and delivers them when due.

Two tasks on the broker's loop (masters only):

* **enqueue** reads the timer topic's consume queues from the checkpointed offsets. Queue 0
  (plain timers) takes the 20-byte entries (commitlog offset, size and the delivery time,
  the tags code) and, for the per-topic pending counts, each record's ``REAL_TOPIC`` (one
  store-lock hold per batch). Each becomes one TimerLog unit chained into the wheel slot of
  its time. Queue 1 (merged delay) also reads the record's properties for its merge key: the
  first message of a topic+key is filed, later ones only update the merge index entry.
* **dequeue** walks the wheel one slot (``timer_precision_ms``) at a time. When the clock
  reaches slot S it reads S's chain, orders it by delivery time (filing order within one
  ms) and, as each unit falls due, reads its record from the commitlog, restores topic,
  queue and properties, and puts groups of records per queue through the put path in one
  call each. S is done when all its units (and any filed into it meanwhile) are delivered.

Nothing is delivered before its time: a unit is put only once the clock passed its
``deliver_ms`` (lag: the loop's scheduling, typically a few ms). A unit filed for a slot
the cursor already passed goes into the current slot. Enqueueing pauses while delivery
lags the clock by more than the wheel can hold (after long downtime it catches up first).
Progress is checkpointed every second (:mod:`.checkpoint`); after a crash, slots since the
checkpoint are delivered again (at-least-once).

**Takeover** (a promoted slave, issue 16): see :mod:`.takeover`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymq.broker.store import BLANK_SIZE
from pymq.broker.store.results import PutStatus
from pymq.broker.timer.checkpoint import TimerCheckpoint
from pymq.broker.timer.hook import MERGE_QUEUE, PLAIN_QUEUE, TIMER_PROPERTIES, TIMER_TOPIC, TimerHook
from pymq.broker.timer.takeover import MERGE_SEP, Takeover, master_state
from pymq.broker.timer.timer_log import FLAG_MERGE, TimerUnit
from pymq.broker.timer.timer_store import TimerFiles
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.errors import MessageDecodeError
from pymq.logs import get_logger
from pymq.protocol.message import Prop
from pymq.protocol.record import (
    RecordFields,
    decode_properties,
    encode_properties,
    find_property,
    parse_record,
    reencode,
)
from pymq.tasks import cancel_all, wait_within

if TYPE_CHECKING:
    from pymq.broker.hosts import DeliveryHost as TimerHost


log = get_logger("broker.timer")

PERSIST_INTERVAL = 1.0
IDLE_POLL = 0.05
READ_ENTRIES = 1024
#: records per put call when delivering (one store call each)
PUT_BATCH = 256
RETRY_DELAY = 1.0
#: units delivered between two yields to the loop
DELIVER_CHUNK = 1024
#: longest sleep while a slot still has units to deliver
LATE_POLL = 0.1


class TimerService:
    def __init__(self, app: TimerHost, clock: Clock = SYSTEM_CLOCK) -> None:
        self.app = app
        self.clock = clock
        cfg = app.config
        self.precision_ms = cfg.timer_precision_ms
        self.max_delay_ms = cfg.timer_max_delay_ms
        self.keep_last = cfg.timer_merge_keep == "last"
        self.root = Path(cfg.store.store_dir) / "timer"
        self.checkpoint_path = self.root / "timerCheckpoint.json"
        #: a slave's copy of its master's delivery state (see :mod:`.takeover`)
        self.master_checkpoint_path = self.root / "masterTimerCheckpoint.json"
        #: while taking over: the master's state whose delivered units the enqueuer skips
        self.takeover: Takeover | None = None
        #: the put hook (install it on the put path before the service starts)
        self.hook = TimerHook(self.max_delay_ms, clock.time_ms)
        self.files: TimerFiles | None = None
        self.queue_offsets: dict[int, int] = {PLAIN_QUEUE: 0, MERGE_QUEUE: 0}
        #: the first slot not completely delivered
        self.cursor_ms = 0
        #: the slot whose chain the dequeuer has read (units filed into it since go to ``late``)
        self.walked: int | None = None
        self.late: list[TimerUnit] = []
        #: the units of the slot being fired, not delivered yet (the same list while the slot fires)
        self.firing: list[TimerUnit] = []
        #: merged delay: "<topic>\x01<key>" -> [deliver_ms, last phys, last size, merged count]
        self.merge: dict[str, list[int]] = {}
        #: real topic -> timers filed and not yet delivered
        self.pending_by_topic: dict[str, int] = {}
        self._wake_enqueue = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: the checkpoint write running in a thread, if any
        self._writing: asyncio.Future[None] | None = None
        self._started = False
        self.enqueued = 0
        self.delivered = 0

    # --- lifecycle ----------------------------------------------------------------------------------------

    def _slots(self) -> int:
        return 2 * (-(-self.max_delay_ms // self.precision_ms)) + 4

    async def start(self) -> None:
        store = self.app.store
        assert store is not None
        own = await asyncio.to_thread(TimerCheckpoint.load, self.checkpoint_path)
        self.takeover = None
        if own is None:
            self.takeover = await Takeover.load(self.master_checkpoint_path, store)
        ck = own or TimerCheckpoint()
        files = TimerFiles(self.root, self._slots(), self.precision_ms, self.app.config.timer_log_file_size)
        undone = await asyncio.to_thread(files.load, ck.timer_log_pos, ck.segment_max_slot)
        self.files = files
        # A wheel made for a shorter maximum delay keeps its size: refuse what it cannot hold.
        limit = (files.wheel.span_ms - 4 * self.precision_ms) // 2
        if limit < self.max_delay_ms:
            log.warning("timer_wheel_smaller_than_max_delay", max_delay_ms=self.max_delay_ms, wheel_limit_ms=limit)
            self.max_delay_ms = self.hook.max_delay_ms = limit
        # A restart after a stop (role changes): nothing of the previous run carries over.
        self.queue_offsets = {PLAIN_QUEUE: 0, MERGE_QUEUE: 0, **ck.queue_offsets}
        self.walked = None
        self.late = []
        self.merge = ck.merge
        self.pending_by_topic = ck.pending_by_topic
        now_slot = files.wheel.slot_of(self.clock.time_ms())
        self.cursor_ms = ck.cursor_ms if ck.cursor_ms >= 0 else now_slot
        if self.takeover is not None:
            # Filing starts over at the timer topic's first entry (queue offsets 0), delivery at the master's cursor.
            master = self.takeover.master
            self.cursor_ms = master.cursor_ms
            log.info(
                "timer_takeover",
                master_cursor_ms=master.cursor_ms,
                master_queue_offsets=master.queue_offsets,
                open_merges=len(master.merge),
            )
        log.info(
            "timer_service_started",
            cursor_lag_ms=max(now_slot - self.cursor_ms, 0),
            undone_units=undone,
            queue_offsets=self.queue_offsets,
            pending_merges=len(self.merge),
        )
        self._started = True
        store.add_arrival_listener(self._on_arrival, TIMER_TOPIC.__eq__)  # the timer topic's arrivals only
        self._tasks = [
            asyncio.ensure_future(self._enqueue_loop()),
            asyncio.ensure_future(self._dequeue_loop()),
            asyncio.ensure_future(self._persist_loop()),
        ]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        if self._writing is not None and not self._writing.done():
            await asyncio.wait([self._writing])
        store = self.app.store
        if self._started and store is not None:
            store.remove_arrival_listener(self._on_arrival)
        if self._started and self.files is not None:
            self.persist()
            self.files.close()
            self.files = None
        self._started = False

    def drop_files(self) -> None:
        """Delete the TimerLog, the wheel and the checkpoint (a broker that is, or becomes, a slave:
        they are stale against its master's; a promotion rebuilds them). Only while stopped."""
        if self._started:
            raise RuntimeError("timer files are in use")
        shutil.rmtree(self.root / "timerlog", ignore_errors=True)
        (self.root / "timerwheel").unlink(missing_ok=True)
        for path in (self.checkpoint_path, self.checkpoint_path.with_name(self.checkpoint_path.name + ".bak")):
            path.unlink(missing_ok=True)

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == TIMER_TOPIC:
            self._wake_enqueue.set()

    # --- checkpoint -----------------------------------------------------------------------------------------

    def snapshot(self) -> TimerCheckpoint:
        files = self.files
        assert files is not None
        return TimerCheckpoint(
            queue_offsets=dict(self.queue_offsets),
            timer_log_pos=files.log.write_pos,
            cursor_ms=self.cursor_ms,
            segment_max_slot=dict(files.segment_max_slot),
            merge={k: list(v) for k, v in self.merge.items()},
            pending_by_topic={t: n for t, n in self.pending_by_topic.items() if n > 0},
        )

    def persist(self) -> None:
        """Flush the timer files, then write the checkpoint (never ahead of the files)."""
        ck = self.snapshot()
        assert self.files is not None
        self.files.flush()
        ck.save(self.checkpoint_path)

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(PERSIST_INTERVAL)
            try:
                ck = self.snapshot()
                files = self.files
                assert files is not None
                # stop() waits for a write under way (it must not unmap the files under the flush)
                write = asyncio.to_thread(_write_checkpoint, files, ck, self.checkpoint_path)
                self._writing = asyncio.ensure_future(write)
                await asyncio.shield(self._writing)
                files.release(ck.cursor_ms)
            except Exception as exc:  # keep checkpointing
                log.warning("timer_checkpoint_failed", reason=str(exc))

    # --- enqueue --------------------------------------------------------------------------------------------

    def _lagging(self) -> bool:
        """Whether delivery is too far behind the clock for new units to be filed safely."""
        assert self.files is not None
        return (
            self.clock.time_ms() - self.cursor_ms > self.files.wheel.span_ms - self.max_delay_ms - 4 * self.precision_ms
        )

    async def _enqueue_loop(self) -> None:
        while True:
            try:
                moved = 0 if self._lagging() else self.enqueue_some()
            except Exception as exc:  # a bad record must not stop timers
                log.warning("timer_enqueue_failed", reason=repr(exc))
                moved = 0
            if moved:
                await asyncio.sleep(0)
                continue
            self._wake_enqueue.clear()
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await wait_within(self._wake_enqueue.wait(), IDLE_POLL)

    def enqueue_some(self) -> int:
        """File up to one read of new timer-topic entries per queue; how many entries were consumed."""
        store = self.app.store
        assert store is not None
        moved = 0
        for qid in (PLAIN_QUEUE, MERGE_QUEUE):
            offset, entries = store.read_queue_entries(TIMER_TOPIC, qid, self.queue_offsets.get(qid, 0), READ_ENTRIES)
            n = len(entries)
            # the real topic of each (pending counts per topic)
            topics = store.map_records([e[0] for e in entries], _real_topic) if qid == PLAIN_QUEUE else []
            take = self.takeover
            for i, (phys, size, deliver_ms) in enumerate(entries):
                if take is not None and take.filed_by_master(qid, offset + i):
                    if size != BLANK_SIZE and size > 0:
                        take.refile(self, qid, deliver_ms, phys, size, (topics[i] or "") if topics else "")
                elif size != BLANK_SIZE and size > 0:
                    if qid == PLAIN_QUEUE:
                        self.file_unit(deliver_ms, phys, size, 0)
                        self.count_pending(topics[i] or "", 1)
                    else:
                        self._file_merged(deliver_ms, phys, size)
                self.queue_offsets[qid] = offset + i + 1
            moved += n
        take = self.takeover
        if take is not None and take.done(self.queue_offsets):
            self.takeover = None
            log.info("timer_takeover_done", pending=sum(self.pending_by_topic.values()), merges=len(self.merge))
        return moved

    def file_unit(self, deliver_ms: int, phys: int, size: int, flags: int) -> None:
        files = self.files
        assert files is not None
        slot = max(files.wheel.slot_of(deliver_ms), self.cursor_ms)
        pos = files.add(slot, deliver_ms, phys, size, flags)
        self.enqueued += 1
        if self.walked == slot:
            self.late.append(TimerUnit(pos, -1, slot, deliver_ms, phys, size, flags))

    def _file_merged(self, deliver_ms: int, phys: int, size: int) -> None:
        key = self.merge_key_at(phys)
        if key is None:
            self.file_unit(deliver_ms, phys, size, 0)  # no readable key: an ordinary timer
            return
        entry = self.merge.get(key)
        if entry is not None:  # the window is open: merge into it (the first keeps its time)
            entry[1], entry[2] = phys, size
            entry[3] += 1
            return
        self.merge[key] = [deliver_ms, phys, size, 1]
        self.file_unit(deliver_ms, phys, size, FLAG_MERGE)
        self.count_pending(key.partition(MERGE_SEP)[0], 1)

    def count_pending(self, topic: str, n: int) -> None:
        if topic:
            left = self.pending_by_topic.get(topic, 0) + n
            if left > 0:
                self.pending_by_topic[topic] = left
            else:
                self.pending_by_topic.pop(topic, None)

    def merge_key_at(self, phys: int) -> str | None:
        store = self.app.store
        assert store is not None
        view = store.read_record(phys)
        if view is None:
            return None
        rec = bytes(view)  # no view of a mapping outlives this call (cleanup may unmap the file)
        del view
        props = decode_properties(parse_record(rec).properties)
        key = props.get(Prop.MERGE_KEY)
        topic = props.get(Prop.REAL_TOPIC)
        return None if not key or not topic else topic + MERGE_SEP + key

    # --- dequeue --------------------------------------------------------------------------------------------

    async def _dequeue_loop(self) -> None:
        files = self.files
        assert files is not None
        empty_run = 0
        while True:
            slot = self.cursor_ms
            now = self.clock.time_ms()
            if now < slot:
                empty_run = 0
                await self.clock.sleep(min(slot - now, 1000) / 1000)
                continue
            pending = files.units(slot)
            self.walked = slot
            if pending or self.late:
                empty_run = 0
                self.firing = pending
                try:
                    await self._fire_slot(pending)
                finally:
                    self.firing = []
            else:
                empty_run += 1
                if empty_run % 1000 == 0:
                    await asyncio.sleep(0)  # catching up over empty slots: let requests in
            self.walked = None
            self.cursor_ms = slot + self.precision_ms

    async def _fire_slot(self, pending: list[TimerUnit]) -> None:
        pending.sort(key=_deliver_ms)
        while True:
            if self.late:
                pending.extend(self.late)
                self.late.clear()
                pending.sort(key=_deliver_ms)
            if not pending:
                return
            now = self.clock.time_ms()
            due = bisect.bisect_right(pending, now, key=_deliver_ms)
            if due:
                batch = pending[: min(due, DELIVER_CHUNK)]
                del pending[: len(batch)]
                failed = self.deliver(batch)
                if failed:
                    pending[:0] = failed
                    await self.clock.sleep(RETRY_DELAY)
                else:
                    await asyncio.sleep(0)  # thousands due at once: let requests in between chunks
                continue
            # Wake at the next due time, or sooner: a unit filed late into this slot may be due earlier.
            await self.clock.sleep(min((pending[0].deliver_ms - now) / 1000, LATE_POLL))

    def deliver(self, units: list[TimerUnit]) -> list[TimerUnit]:
        """Put due units on their real topics (grouped per queue); the units to try again."""
        app = self.app
        store = app.store
        assert store is not None
        groups: dict[tuple[str, int], list[tuple[TimerUnit, bytes]]] = defaultdict(list)
        records = store.map_records([u.phys for u in units], bytes)  # copies: no view outlives the store's lock
        for u, record in zip(units, records, strict=True):
            out = self._restore(u, record)
            if out is not None:
                groups[(out[0], out[1])].append((u, out[2]))
        failed: list[TimerUnit] = []
        for (topic, qid), items in groups.items():
            for i in range(0, len(items), PUT_BATCH):
                chunk = items[i : i + PUT_BATCH]
                results = app.put_path.put(topic, qid, b"".join(rec for _, rec in chunk))
                app.stats.record_put(topic, results)
                for (u, _), res in zip(chunk, results, strict=False):
                    if res.status == PutStatus.PUT_OK:
                        self.delivered += 1
                        self.count_pending(topic, -1)
                    else:
                        log.warning("timer_delivery_failed", topic=topic, status=res.status.name, reason=res.reason)
                        failed.append(u)
        return failed

    def _restore(self, u: TimerUnit, rec: bytes | None) -> tuple[str, int, bytes] | None:
        """The record of ``u`` (``rec``, read from the commitlog) as it goes to its real topic,
        or None to drop it (logged)."""
        store = self.app.store
        assert store is not None
        if rec is None:
            log.warning("timer_message_gone", offset=u.phys)
            return None
        r: RecordFields = parse_record(rec)
        props = decode_properties(r.properties)
        count = 0
        if u.flags & FLAG_MERGE:
            key = props.get(Prop.REAL_TOPIC, "") + MERGE_SEP + props.get(Prop.MERGE_KEY, "")
            entry = self.merge.pop(key, None)
            count = entry[3] if entry else 1
            if self.keep_last and entry is not None and entry[1] != u.phys:
                last = store.read_record(entry[1])
                if last is not None:
                    r = parse_record(bytes(last))
                    del last
                    props = decode_properties(r.properties)
        topic = props.pop(Prop.REAL_TOPIC, None)
        qid_raw = props.pop(Prop.REAL_QID, "0")
        for name in TIMER_PROPERTIES:
            props.pop(name, None)
        if count:
            props[Prop.MERGE_COUNT] = str(count)
        if not topic:
            log.warning("timer_message_without_real_topic", offset=u.phys)
            return None
        tc = self.app.topics.get(topic)
        if tc is None:
            log.warning("timer_message_topic_gone", topic=topic, offset=u.phys)
            self.count_pending(topic, -1)
            return None
        qid = int(qid_raw) if qid_raw.isdigit() else 0
        if qid >= tc.writeQueueNums:
            qid %= tc.writeQueueNums
        return topic, qid, reencode(r, topic.encode(), encode_properties(props))

    # --- admin ----------------------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """GET_TIMER_METRICS' body: pending timers per real topic (RocketMQ's TimerMetrics shape)."""
        now = self.clock.time_ms()
        return {"timingCount": {t: {"count": n, "timeStamp": now} for t, n in sorted(self.pending_by_topic.items())}}

    def sync_state(self) -> dict[str, Any]:
        """GET_TIMER_CHECK_POINT's body: what a slave needs to take delivery over (see :mod:`.takeover`)."""
        return master_state(self)

    def status(self) -> dict[str, Any]:
        return {
            "timerPending": sum(self.pending_by_topic.values()),
            "timerEnqueued": self.enqueued,
            "timerDelivered": self.delivered,
            "timerCursorLagMs": max(self.clock.time_ms() - self.cursor_ms, 0),
            "timerPendingMerges": len(self.merge),
        }


def _write_checkpoint(files: TimerFiles, ck: TimerCheckpoint, path: Path) -> None:
    """Flush the timer files, then write the checkpoint (a worker thread)."""
    files.flush()
    ck.save(path)


def _deliver_ms(u: TimerUnit) -> int:
    return u.deliver_ms


_REAL_TOPIC = b"REAL_TOPIC\x01"


def _real_topic(rec: memoryview | None) -> str:
    """The REAL_TOPIC property of a timer-topic record ('' if unreadable)."""
    if rec is None:
        return ""
    try:
        raw = find_property(bytes(parse_record(rec).properties), _REAL_TOPIC)
    except MessageDecodeError:
        return ""
    return raw.decode("utf-8", "replace") if raw else ""


__all__ = ["TimerService"]
