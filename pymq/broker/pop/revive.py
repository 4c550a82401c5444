"""Pop state: open checkpoints of the revive log, acks, changes of invisible time, and revival.

The revive log (:mod:`.records`) is the truth; :class:`PopState` keeps an index of the
checkpoints not finished yet (one small object per popped batch, the ack bits an int),
rebuilt at start by replaying each revive queue from its revive offset — the oldest
unfinished checkpoint's position, persisted in ``config/popReviveOffset.json``. Every
change is written to the log before it is applied to the index, so a kill -9 loses
nothing: unacked messages are revived after the restart, acked ones stay acked.

The revive service (:meth:`PopState.revive_due`, every ``pop_revive_interval_seconds``)
takes checkpoints whose invisible time is over (a heap by revive time) and re-puts each
unacked message through the put path: to ``%RETRY%<group>_<topic>`` with reconsume times
+ 1, visible at once (a SimpleConsumer's retry interval is its invisible time), or to
``%DLQ%<group>`` once the message was consumed the group's ``retryMaxTimes`` times.
Re-puts are at least once: a crash between a re-put and the revive offset's persistence
re-puts the message again after the restart.

The group's consumer offsets (which pop moves past popped batches at once) are persisted
before a revive offset, so the revive offset never passes a checkpoint whose offset move
is not on disk; replay moves offsets forward to each replayed checkpoint's next offset.

The revive offsets are also kept as consumer offsets of :data:`REVIVE_GROUP` on the revive
topic (as RocketMQ keeps them), so a slave's consumer-offset copy carries them and a
promoted slave replays from its old master's position (issue 16): what the old master
revived before it is not revived again. Checkpoints after the oldest open one that the old
master revived are revived again (at-least-once).
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from functools import reduce
from operator import or_
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.pop.receipt import CheckpointAcks, ReceiptHandle
from pymq.broker.pop.records import (
    ACK_TAG,
    CK_TAG,
    CheckPoint,
    ack_record,
    acks_record,
    parse_ack,
    revive_queue_of,
    revive_topic,
)
from pymq.broker.retry.policy import exhausted, keep_origin, retry_limit
from pymq.broker.store.config_files import read_json, remove_json, write_json_atomic
from pymq.broker.store.results import GetStatus, PutStatus
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.logs import get_logger
from pymq.protocol.message import Prop
from pymq.protocol.record import decode_properties, encode_properties, find_property, iter_spans, parse_record, reencode
from pymq.protocol.requests import RETRY_PREFIX, dlq_topic, pop_retry_topic
from pymq.protocol.route import PERM_READ, PERM_READ_WRITE, PERM_WRITE

if TYPE_CHECKING:
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.put_path import PutPath
    from pymq.broker.store import MessageStore
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager

log = get_logger("broker.pop")

_TAGS = b"TAGS\x01"
#: the group name the revive service reads the revive log as (RocketMQ's)
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: fully acked checkpoints remembered to answer "already acked" (beyond: "stale")
DONE_MEMORY = 65_536
_REPLAY_BATCH = 256
_RETRY_LATER_MS = 1000
#: delay level and RocketMQ's timer properties (delivery time / delay)
_TIMING_PROPS = (Prop.DELAY, "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


def _all_acceptable(g: CheckpointAcks, offsets: Sequence[int], taken: int) -> int:
    """The bits of ``g``'s indexes if every one of its handles may be acked (in range, naming its
    queue offset, distinct, none already acked or ``taken``), else 0: then each is checked alone."""
    indexes = g.indexes
    if min(indexes) < 0 or max(indexes) >= len(offsets) or len(set(indexes)) != len(indexes):
        return 0
    if list(map(offsets.__getitem__, indexes)) != g.queue_offsets:
        return 0
    mask = reduce(or_, map((1).__lshift__, indexes))
    return 0 if mask & taken else mask


class PopError(Exception):
    """A refused ack or change: ``reason`` is the InvalidReceiptHandleError reason (or ``store``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


#: the revive offsets (a master's own: a slave's or a demoted master's are stale)
STATE_FILE = "popReviveOffset.json"


def drop_state(config_dir: Path) -> None:
    """Delete the revive offsets (a slave keeps none; a promotion starts from the copied consumer offsets)."""
    remove_json(config_dir / STATE_FILE)


class PopState:
    def __init__(
        self,
        *,
        store: MessageStore,
        put_path: PutPath,
        topics: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        config_dir: Path,
        cluster: str,
        revive_queues: int,
        max_inflight: int = 100_000,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.put_path = put_path
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.offsets = offsets
        self.clock = clock
        self.revive_topic = revive_topic(cluster)
        self.revive_queues = revive_queues
        #: open checkpoints at most before pops stop taking messages (bounds the index below)
        self.max_inflight = max_inflight
        self.path = config_dir / STATE_FILE
        #: ck commitlog offset -> open checkpoint
        self.open: dict[int, CheckPoint] = {}
        #: revive qid -> {revive queue offset: ck}, in log order (the first is the oldest open one)
        self._by_queue: dict[int, dict[int, CheckPoint]] = {q: {} for q in range(revive_queues)}
        self._due: list[tuple[int, int]] = []  # (revive time, ck offset), lazily cleaned
        self._done: OrderedDict[int, None] = OrderedDict()
        #: revive qid -> where replay starts (persisted)
        self.revive_offsets: dict[int, int] = {}
        self._persisted: dict[int, int] = {}
        self.revived = 0
        self.dead_lettered = 0

    # --- start: the revive log back into the index ---------------------------------------------------------

    def start(self) -> None:
        """Create the revive topic, load revive offsets and replay the log (the store is started)."""
        # Read-only to clients: a producer must not be able to write checkpoints or acks (the broker's
        # own puts go through the put path, which checks no permission).
        tc = self.topics.ensure_system_topic(self.revive_topic, self.revive_queues, PERM_READ)
        if tc.perm & PERM_WRITE:
            tc = self.topics.upsert(dataclasses.replace(tc, perm=PERM_READ))
        if tc.writeQueueNums != self.revive_queues:
            # Queue count is part of where records live: keep the topic's (config changed later).
            self.revive_queues = tc.writeQueueNums
            self._by_queue = {q: {} for q in range(self.revive_queues)}
        data = read_json(self.path) or {}
        for qid, off in (data.get("offsetTable") or {}).items():
            self.revive_offsets[int(qid)] = int(off)
        for qid, off in self.offsets.offsets_of(REVIVE_GROUP, self.revive_topic).items():
            # a promoted slave: its old master's position, copied with the consumer offsets
            off = min(off, self.store.max_offset(self.revive_topic, qid))  # never past this store's end
            self.revive_offsets[qid] = max(self.revive_offsets.get(qid, 0), off)
        self._persisted = dict(self.revive_offsets)
        replayed = 0
        for qid in range(self.revive_queues):
            replayed += self._replay(qid)
        if replayed:
            log.info("pop_state_replayed", records=replayed, open_checkpoints=len(self.open))

    def _replay(self, qid: int) -> int:
        offset = max(self.revive_offsets.get(qid, 0), self.store.min_offset(self.revive_topic, qid))
        count = 0
        while True:
            res = self.store.get_messages(REVIVE_GROUP, self.revive_topic, qid, offset, _REPLAY_BATCH, 1 << 30)
            if res.status != GetStatus.FOUND:
                if res.status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
                    offset = res.next_begin_offset
                    continue
                return count
            for buf in res.buffers:
                for pos, _size in iter_spans(buf):
                    r = parse_record(buf, pos)
                    tag = find_property(r.properties, _TAGS)
                    count += 1
                    try:
                        if tag == CK_TAG.encode():
                            ck = CheckPoint.from_body(r.body)
                            self._open(ck, r.physical_offset, qid, r.queue_offset)
                            if ck.next_offset > self.offsets.query(ck.group, ck.topic, ck.queue_id):
                                self.offsets.commit(ck.group, ck.topic, ck.queue_id, ck.next_offset)
                        elif tag == ACK_TAG.encode():
                            for ck_offset, indexes in parse_ack(r.body):
                                found = self.open.get(ck_offset)
                                if found is not None:
                                    self._set_acked(found, indexes)
                    except (ValueError, KeyError, TypeError) as exc:
                        log.warning("revive_record_unreadable", qid=qid, offset=r.queue_offset, error=str(exc))
            offset = res.next_begin_offset

    # --- the index ----------------------------------------------------------------------------------------

    def _open(self, ck: CheckPoint, ck_offset: int, qid: int, revive_offset: int) -> None:
        ck.ck_offset, ck.revive_qid, ck.revive_offset = ck_offset, qid, revive_offset
        self.open[ck_offset] = ck
        self._by_queue.setdefault(qid, {})[revive_offset] = ck
        heapq.heappush(self._due, (ck.revive_time, ck_offset))

    def _close(self, ck: CheckPoint, *, acked: bool) -> None:
        self.open.pop(ck.ck_offset, None)
        self._by_queue.get(ck.revive_qid, {}).pop(ck.revive_offset, None)
        if acked:
            self._done[ck.ck_offset] = None
            if len(self._done) > DONE_MEMORY:
                self._done.popitem(last=False)

    def _set_acked(self, ck: CheckPoint, indexes: list[int]) -> None:
        count = len(ck.offsets)
        self._add_acked(ck, sum({1 << i for i in indexes if 0 <= i < count}))

    def _add_acked(self, ck: CheckPoint, bits: int) -> None:
        """Mark the messages of ``bits`` (bit i: index i) acked; the checkpoint closes once all are."""
        ck.acked |= bits
        if ck.all_acked:
            self._close(ck, acked=True)

    def inflight(self, group: str | None = None) -> dict[str, dict[str, int]]:
        """group -> topic -> messages popped and neither acked nor revived yet."""
        out: dict[str, dict[str, int]] = {}
        for ck in self.open.values():
            if group is not None and ck.group != group:
                continue
            topics = out.setdefault(ck.group, {})
            topics[ck.topic] = topics.get(ck.topic, 0) + len(ck.offsets) - ck.acked.bit_count()
        return out

    def inflight_by_queue(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, queue) -> in-flight messages of ``group`` (consumer-progress shows them)."""
        out: dict[tuple[str, int], int] = {}
        for ck in self.open.values():
            if ck.group == group:
                key = (ck.topic, ck.queue_id)
                out[key] = out.get(key, 0) + len(ck.offsets) - ck.acked.bit_count()
        return out

    @property
    def full(self) -> bool:
        """Too many batches in flight: pops take nothing until acks or revivals make room."""
        return len(self.open) >= self.max_inflight

    # --- writes (each stored in the revive log first) ------------------------------------------------------

    def add_checkpoint(self, ck: CheckPoint) -> bool:
        """Store a popped batch's checkpoint; False if the store refused it (nothing popped then)."""
        qid = revive_queue_of(ck.group, ck.topic, self.revive_queues)
        res = self.put_path.put(self.revive_topic, qid, ck.to_record(self.revive_topic))[0]
        if res.status != PutStatus.PUT_OK:
            log.warning("pop_checkpoint_not_stored", status=res.status.name, reason=res.reason)
            return False
        self._open(ck, res.physical_offset, qid, res.queue_offset)
        return True

    def _checkpoint_of(self, h: ReceiptHandle | CheckpointAcks, now: int) -> CheckPoint:
        """The open checkpoint a handle (or a group of handles) names; PopError if none is."""
        if now >= h.deadline:
            raise PopError("expired", f"invisible time ended {now - h.deadline} ms ago")
        ck = self.open.get(h.ck_offset)
        if ck is None:
            if h.ck_offset in self._done:
                raise PopError("acked", "message already acked")
            raise PopError("stale", "the broker holds no in-flight message for this handle")
        if ck.group != h.group or ck.topic != h.topic or ck.queue_id != h.queue_id or ck.pop_time != h.pop_time:
            raise PopError("stale", "handle does not match its checkpoint")
        return ck

    def _checked(self, h: ReceiptHandle, now: int) -> CheckPoint:
        ck = self._checkpoint_of(h, now)
        if not 0 <= h.index < len(ck.offsets) or ck.offsets[h.index] != h.queue_offset:
            raise PopError("stale", "handle does not match its checkpoint")
        if ck.acked >> h.index & 1:
            raise PopError("acked", "message already acked or its handle replaced")
        return ck

    def ack(self, h: ReceiptHandle) -> None:
        """Ack one message; PopError says why not."""
        now = self.clock.time_ms()
        ck = self._checked(h, now)
        res = self.put_path.put(
            self.revive_topic, ck.revive_qid, ack_record(self.revive_topic, ck.ck_offset, [h.index], now)
        )
        if res[0].status != PutStatus.PUT_OK:
            raise PopError("store", f"ack not stored: {res[0].reason or res[0].status.name}")
        self._set_acked(ck, [h.index])

    def ack_checkpoints(self, groups: list[CheckpointAcks], out: list[PopError | None]) -> None:
        """Ack the handles of a batch, grouped by checkpoint: ``out[position]`` gets each refused
        handle's reason (acked ones are left alone). One ack record per revive queue naming its
        checkpoints, all stored in one store call."""
        now = self.clock.time_ms()
        by_ck: dict[int, list[int]] = {}  # ck offset -> indexes acked
        slots: dict[int, list[int]] = {}  # ck offset -> their positions in the batch
        taken: dict[int, int] = {}  # ck offset -> bits of the indexes in this batch
        for g in groups:
            try:
                ck = self._checkpoint_of(g, now)
            except PopError as exc:
                for pos in g.positions:
                    out[pos] = exc
                continue
            c, offsets, acked = ck.ck_offset, ck.offsets, ck.acked
            count, bits = len(offsets), taken.get(c, 0)
            indexes, positions = by_ck.setdefault(c, []), slots.setdefault(c, [])
            mask = _all_acceptable(g, offsets, acked | bits) if len(g.indexes) > 1 else 0
            if mask:  # every handle of the group: checked at once (one alone: the loop is cheaper)
                taken[c] = bits | mask
                indexes.extend(g.indexes)
                positions.extend(g.positions)
                continue
            for pos, i, queue_offset in zip(g.positions, g.indexes, g.queue_offsets, strict=True):
                if not 0 <= i < count or offsets[i] != queue_offset:
                    out[pos] = PopError("stale", "handle does not match its checkpoint")
                elif acked >> i & 1:
                    out[pos] = PopError("acked", "message already acked or its handle replaced")
                elif bits >> i & 1:
                    out[pos] = PopError("acked", "message acked twice in one batch")
                else:
                    bits |= 1 << i
                    indexes.append(i)
                    positions.append(pos)
            taken[c] = bits
        per_queue: dict[int, list[int]] = {}
        for ck_offset, indexes in by_ck.items():
            if indexes:
                per_queue.setdefault(self.open[ck_offset].revive_qid, []).append(ck_offset)
        if not per_queue:
            return
        # one ack record per revive queue (a checkpoint's acks go to its queue: replay and revive
        # offsets are per queue), naming each of its checkpoints; all in one store call
        queues = list(per_queue.items())
        revive = self.revive_topic
        answers = self.put_path.put_queues(
            [(revive, qid, acks_record(revive, [(c, by_ck[c]) for c in cks], now)) for qid, cks in queues]
        )
        for (_qid, cks), results in zip(queues, answers, strict=True):
            res = results[0]
            for c in cks:
                if res.status == PutStatus.PUT_OK:
                    still_open = self.open.get(c)
                    if still_open is not None:
                        self._add_acked(still_open, taken[c])
                else:
                    err = PopError("store", f"ack not stored: {res.reason or res.status.name}")
                    for i in slots[c]:
                        out[i] = err

    def change_invisible(self, h: ReceiptHandle, invisible_ms: int) -> CheckPoint:
        """Make the message invisible for ``invisible_ms`` from now: a new one-message checkpoint
        plus an ack of the old index, stored as one batch. Returns the new checkpoint (index 0)."""
        now = self.clock.time_ms()
        ck = self._checked(h, now)
        new = CheckPoint(
            ck.group, ck.topic, ck.queue_id, array("q", (h.queue_offset,)), ck.next_offset, now, invisible_ms
        )
        data = new.to_record(self.revive_topic) + ack_record(self.revive_topic, ck.ck_offset, [h.index], now)
        results = self.put_path.put(self.revive_topic, ck.revive_qid, data)
        if any(r.status != PutStatus.PUT_OK for r in results):
            bad = next(r for r in results if r.status != PutStatus.PUT_OK)
            raise PopError("store", f"change not stored: {bad.reason or bad.status.name}")
        self._open(new, results[0].physical_offset, ck.revive_qid, results[0].queue_offset)
        self._set_acked(ck, [h.index])
        return new

    # --- revival ------------------------------------------------------------------------------------------

    def revive_due(self) -> int:
        """Revive every checkpoint past its invisible time; persist revive offsets. Returns messages revived."""
        now = self.clock.time_ms()
        count = 0
        retry_later: list[tuple[int, int]] = []
        while self._due and self._due[0][0] <= now:
            _t, ck_offset = heapq.heappop(self._due)
            ck = self.open.get(ck_offset)
            if ck is None or ck.revive_time > now:
                continue
            done, n = self._revive(ck)
            count += n
            if done:
                self._close(ck, acked=False)
            else:
                retry_later.append((now + _RETRY_LATER_MS, ck_offset))
        for item in retry_later:
            heapq.heappush(self._due, item)
        self.persist_offsets()
        return count

    def _revive(self, ck: CheckPoint) -> tuple[bool, int]:
        """Re-put the unacked messages of ``ck``; (all handled, how many re-put)."""
        sg = self.subscription_groups.get(ck.group)
        limit = retry_limit(sg)
        n = 0
        for i in ck.unacked():
            offset = ck.offsets[i]
            res = self.store.get_messages(REVIVE_GROUP, ck.topic, ck.queue_id, offset, 1, 1 << 30)
            if res.status != GetStatus.FOUND:
                log.warning("pop_revive_message_gone", topic=ck.topic, queue_id=ck.queue_id, offset=offset)
                ck.acked |= 1 << i
                continue
            r = parse_record(res.buffers[0], 0)
            props = decode_properties(r.properties)
            topic = r.topic.decode()
            original = props.get(Prop.RETRY_TOPIC) if topic.startswith(RETRY_PREFIX) else None
            original = original or topic
            keep_origin(props, original, props.get(Prop.UNIQ_KEY))
            for timing in _TIMING_PROPS:  # delivered already: a redelivery must not be delayed again
                props.pop(timing, None)
            if exhausted(r.reconsume_times, limit):
                target = dlq_topic(ck.group)
                tc = self.topics.ensure_system_topic(target, 1, PERM_READ_WRITE)
            else:
                target = pop_retry_topic(ck.group, original)
                tc = self.topics.ensure_system_topic(target, sg.retryQueueNums if sg else 1, PERM_READ_WRITE)
            record = reencode(r, target.encode(), encode_properties(props), reconsume_times=r.reconsume_times + 1)
            put = self.put_path.put(target, random.randrange(tc.writeQueueNums), record)[0]
            if put.status != PutStatus.PUT_OK:
                log.warning("pop_revive_put_failed", target=target, status=put.status.name, reason=put.reason)
                return False, n
            ck.acked |= 1 << i  # in memory only: a crash before the revive offset moves re-puts it
            n += 1
            if target == dlq_topic(ck.group):
                self.dead_lettered += 1
                log.info("pop_message_dead_lettered", group=ck.group, topic=original, reconsume_times=r.reconsume_times)
            else:
                self.revived += 1
        return True, n

    def persist_offsets(self) -> None:
        """Persist where replay starts (after the consumer offsets it relies on)."""
        for qid, cks in self._by_queue.items():
            if cks:
                self.revive_offsets[qid] = next(iter(cks))
            else:
                self.revive_offsets[qid] = self.store.max_offset(self.revive_topic, qid)
        if self.revive_offsets != self._persisted:
            for qid, off in self.revive_offsets.items():
                self.offsets.commit(REVIVE_GROUP, self.revive_topic, qid, off)
            self.offsets.persist_if_dirty()
            write_json_atomic(self.path, {"offsetTable": {str(k): v for k, v in sorted(self.revive_offsets.items())}})
            self._persisted = dict(self.revive_offsets)
