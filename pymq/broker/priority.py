"""Priority topics: higher-priority messages are consumed first, FIFO within a priority, no starvation.

A topic with the attribute ``priority.levels=L`` (2..100; ``pymq-admin topic-create
--attribute priority.levels=10``) takes messages with the property ``PRIORITY`` = 0..L-1
(higher is more urgent; missing or unreadable is 0, above L-1 is L-1).

Inside the RocketMQ model, behind each queue ``q`` of the topic stand L internal level
queues: :class:`PriorityHook` (last on the put path) stores a message for ``(topic, q)`` in
``rmq_sys_priority_<topic>`` queue ``q*L + level`` instead. Consumers keep reading the
topic's ordinary queues; :class:`PriorityService` *refills* queue ``q`` from its level
queues when a pull (any group) has read everything moved so far (:class:`PriorityInterceptor`
sees PULL_MESSAGE before its handler), and when a message reaches a level queue while a
consumer is waiting on ``q`` (long polling). A refill moves up to ``priority_refill_batch``
messages, chosen by one rule:

1. messages that have waited ``priority_max_wait_ms`` or longer in a level queue go first,
   oldest first (the anti-starvation rule: nothing waits much longer than that while the
   queue is being consumed);
2. then the highest non-empty level, in arrival order, then the next level down.

So among the messages not yet moved, higher priority is consumed first; within one
priority, one queue is FIFO. The order is fixed when messages move: a message already
moved (or buffered by a push consumer) is not overtaken by a later, more urgent one.
Orderly consumption works on the moved order: messages of one queue with the same
priority keep their send order; messages of different priorities do not (by design).
Refill progress per level queue is persisted every second (``config/priorityOffset.json``);
after a kill -9 up to a second of moves may be repeated (at-least-once). Masters only.
The same offsets are kept as consumer offsets of :data:`PRIORITY_GROUP` on the level
queues, so a slave's consumer-offset copy carries them and a promoted slave goes on where
its old master stopped (issue 16; moves since the last copy are repeated).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.put_hooks import Segment, move_records
from pymq.broker.store.config_files import read_json, write_json_atomic
from pymq.broker.store.results import GetStatus, PutStatus
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.errors import MessageDecodeError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.record import find_property, iter_spans, parse_record, reencode
from pymq.protocol.record_batch import SplitBatch
from pymq.tasks import cancel_and_wait
from pymq.transport.channel import Channel
from pymq.transport.interceptor import Interceptor

if TYPE_CHECKING:
    from pymq.broker.hosts import OffsetsDeliveryHost as PriorityHost
    from pymq.broker.store import MessageStore
    from pymq.broker.topics import TopicConfigManager
    from pymq.protocol.route import TopicConfig


log = get_logger("broker.priority")

PRIORITY_ATTRIBUTE = "priority.levels"
PRIORITY_PREFIX = "rmq_sys_priority_"
MAX_LEVELS = 100
_PRIORITY = b"PRIORITY\x01"
PERSIST_INTERVAL = 1.0
#: the group whose consumer offsets on the level queues are the refill offsets (copied to slaves)
PRIORITY_GROUP = "CID_RMQ_SYS_PRIORITY"


def priority_levels(tc: TopicConfig | None) -> int:
    """How many levels a topic has (0: not a priority topic)."""
    if tc is None or not tc.attributes:
        return 0
    raw = tc.attributes.get(PRIORITY_ATTRIBUTE)
    try:
        n = int(raw) if raw is not None else 0
    except ValueError:
        return 0
    return n if 2 <= n <= MAX_LEVELS else 0


def level_topic(topic: str) -> str:
    return PRIORITY_PREFIX + topic


def is_level_topic(topic: str) -> bool:
    """Whether ``topic`` is the internal level topic of a priority topic (the service's arrivals)."""
    return topic.startswith(PRIORITY_PREFIX)


def message_level(props: bytes, levels: int) -> int:
    raw = find_property(props, _PRIORITY) if props else None
    try:
        p = int(raw) if raw else 0
    except ValueError:
        p = 0
    return min(max(p, 0), levels - 1)


class PriorityHook:
    """Moves every record put on a priority topic's queue ``q`` to its level queue ``q*L + level``."""

    def __init__(self, topics: TopicConfigManager) -> None:
        self.topics = topics
        self.max_message_size = 0
        #: whether any priority topic exists (refreshed when the topic table's version changes)
        self.active = False
        self._seen = -1
        #: set while the service moves records to the topic itself (they must pass)
        self.passing = False

    def install(self, store: MessageStore) -> None:
        self.max_message_size = store.max_message_size

    def refresh(self) -> bool:
        """Whether any priority topic exists (looked up again when the topic table changed)."""
        counter = self.topics.data_version["counter"]
        if counter != self._seen:
            self._seen = counter
            self.active = any(priority_levels(tc) for tc in self.topics.topics.values())
        return self.active

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        # refresh() only when the topic table changed: this runs on every put
        if self.topics.data_version["counter"] != self._seen:
            self.refresh()
        return self.active and not self.passing

    def rewrite(self, topic: str, queue_id: int, data: bytes) -> list[Segment]:
        levels = priority_levels(self.topics.get(topic))
        if not levels:
            return [(topic, queue_id, data)]
        target = level_topic(topic).encode()
        topic_b = topic.encode()
        real = target.decode()

        def move(pos: int, size: int) -> Segment | None:
            try:
                r = parse_record(data, pos, check_crc=True)
            except MessageDecodeError:
                return None  # the store refuses it where it stands
            if r.total_size != size or r.topic != topic_b:
                return None
            rec = reencode(r, target, bytes(r.properties))
            if len(rec) > self.max_message_size:
                return None
            return (real, queue_id * levels + message_level(r.properties, levels), rec)

        return move_records(topic, queue_id, data, move)


class PriorityService:
    """Refills priority topics' queues from their level queues (see the module docstring)."""

    def __init__(self, app: PriorityHost, hook: PriorityHook, clock: Clock = SYSTEM_CLOCK) -> None:
        self.app = app
        self.hook = hook
        self.clock = clock
        self.path = Path(app.config.store.store_dir) / "config" / "priorityOffset.json"
        #: (topic, queue, level) -> next offset of the level queue to move
        self.offsets: dict[tuple[str, int, int], int] = {}
        #: queues a consumer waits on with nothing left to move
        self.hungry: set[tuple[str, int]] = set()
        self.moved = 0
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        data = read_json(self.path) or {}
        for key, off in (data.get("offsetTable") or {}).items():
            topic, _, rest = key.rpartition("@")
            topic, _, q = topic.rpartition("@")
            with contextlib.suppress(ValueError):
                self.offsets[(topic, int(q), int(rest))] = int(off)
        self._merge_copied_offsets()
        self._loop = asyncio.get_running_loop()
        store = self.app.store
        assert store is not None
        store.add_arrival_listener(self._on_arrival, is_level_topic)
        self._task = asyncio.ensure_future(self._persist_loop())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
            self.persist()
            store = self.app.store
            if store is not None:
                store.remove_arrival_listener(self._on_arrival)
            self.hungry.clear()

    def _merge_copied_offsets(self) -> None:
        """Take the refill offsets kept as consumer offsets (a promoted slave's copy of its master's)."""
        consumer_offsets = self.app.offsets
        store = self.app.store
        assert store is not None
        for internal in consumer_offsets.topics_of_group(PRIORITY_GROUP):
            if not internal.startswith(PRIORITY_PREFIX):
                continue
            topic = internal[len(PRIORITY_PREFIX) :]
            levels = priority_levels(self.app.topics.get(topic))
            if not levels:
                continue
            for qid, off in consumer_offsets.offsets_of(PRIORITY_GROUP, internal).items():
                key = (topic, qid // levels, qid % levels)
                # never past this store's end (a failover that lost the master's tail): what comes next is new
                self.offsets[key] = max(self.offsets.get(key, 0), min(off, store.max_offset(internal, qid)))

    def persist(self) -> None:
        self._dirty = False
        table = {f"{t}@{q}@{p}": off for (t, q, p), off in sorted(self.offsets.items())}
        write_json_atomic(self.path, {"offsetTable": table})

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(PERSIST_INTERVAL)
            if self._dirty:
                try:
                    self.persist()
                except OSError as exc:
                    log.warning("priority_offsets_not_saved", reason=str(exc))

    # --- triggers ---------------------------------------------------------------------------------------

    def on_pull(self, topic: str, queue_id: int, offset: int) -> None:
        """A pull of ``(topic, queue_id)`` from ``offset``: refill if it has read everything moved."""
        levels = priority_levels(self.app.topics.get(topic))
        if not levels:
            return
        store = self.app.store
        assert store is not None
        if offset < store.max_offset(topic, queue_id):
            return
        if self.refill(topic, queue_id, levels) == 0:
            self.hungry.add((topic, queue_id))

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if not self.hungry or not topic.startswith(PRIORITY_PREFIX):
            return
        real = topic[len(PRIORITY_PREFIX) :]
        levels = priority_levels(self.app.topics.get(real))
        if levels and (real, queue_id // levels) in self.hungry and self._loop is not None:
            self._loop.call_soon_threadsafe(self._refill_hungry, real, queue_id // levels)

    def _refill_hungry(self, topic: str, queue_id: int) -> None:
        if (topic, queue_id) not in self.hungry:
            return
        levels = priority_levels(self.app.topics.get(topic))
        if not levels or self.refill(topic, queue_id, levels) > 0:
            self.hungry.discard((topic, queue_id))

    # --- the rule ---------------------------------------------------------------------------------------

    def refill(self, topic: str, queue_id: int, levels: int) -> int:
        """Move up to ``priority_refill_batch`` messages to ``(topic, queue_id)``; how many moved."""
        app = self.app
        store = app.store
        assert store is not None
        cfg = app.config
        internal = level_topic(topic)
        want = cfg.priority_refill_batch
        # level -> [next offset, end]
        avail: dict[int, list[int]] = {}
        for p in range(levels):
            qid = queue_id * levels + p
            end = store.max_offset(internal, qid)
            off = max(self.offsets.get((topic, queue_id, p), 0), store.min_offset(internal, qid))
            if off < end:
                avail[p] = [off, end]
        if not avail:
            return 0
        picks: list[tuple[int, int]] = []  # (level, offset), in the order they move
        if cfg.priority_max_wait_ms > 0:
            oldest_ok = self.clock.time_ms() - cfg.priority_max_wait_ms
            heads = {p: store.store_time_at(internal, queue_id * levels + p, a[0]) for p, a in avail.items()}
            while len(picks) < want:
                aged = [(ts, p) for p, ts in heads.items() if 0 < ts <= oldest_ok]
                if not aged:
                    break
                _, p = min(aged)
                a = avail[p]
                picks.append((p, a[0]))
                a[0] += 1
                if a[0] >= a[1]:
                    del heads[p]
                else:
                    heads[p] = store.store_time_at(internal, queue_id * levels + p, a[0])
        for p in sorted(avail, reverse=True):
            a = avail[p]
            while len(picks) < want and a[0] < a[1]:
                picks.append((p, a[0]))
                a[0] += 1
        return self._move(topic, queue_id, levels, picks)

    def _move(self, topic: str, queue_id: int, levels: int, picks: list[tuple[int, int]]) -> int:
        store = self.app.store
        assert store is not None
        internal = level_topic(topic)
        topic_b = topic.encode()
        records: list[bytes] = []
        moved: list[tuple[int, int]] = []
        i = 0
        while i < len(picks):  # runs of consecutive offsets of one level: one read each
            p, start = picks[i]
            j = i + 1
            while j < len(picks) and picks[j] == (p, start + (j - i)):
                j += 1
            got = store.get_messages("PRIORITY", internal, queue_id * levels + p, start, j - i)
            if got.status != GetStatus.FOUND:
                break
            n = 0
            for buf in got.buffers:
                for pos, _size in iter_spans(buf):
                    r = parse_record(buf, pos)
                    records.append(reencode(r, topic_b, bytes(r.properties)))
                    moved.append((p, r.queue_offset))
                    n += 1
            if n < j - i:
                break
            i = j
        if not records:
            return 0
        self.hook.passing = True
        try:
            results = self.app.put_path.put(topic, queue_id, b"".join(records))
        finally:
            self.hook.passing = False
        self.app.stats.record_put(topic, results)
        done = 0
        for (p, off), res in zip(moved, results, strict=False):
            if res.status != PutStatus.PUT_OK:
                log.warning("priority_move_failed", topic=topic, status=res.status.name, reason=res.reason)
                break
            self.offsets[(topic, queue_id, p)] = off + 1
            self.app.offsets.commit(PRIORITY_GROUP, internal, queue_id * levels + p, off + 1)
            done += 1
        if done:
            self._dirty = True
            self.moved += done
        return done


class PriorityInterceptor(Interceptor):
    """Before a PULL_MESSAGE of a priority topic's queue: refill it if the pull has read everything."""

    codes = frozenset({RequestCode.PULL_MESSAGE})

    def __init__(self, service: PriorityService) -> None:
        self.service = service

    def before(self, request: Command, channel: Channel) -> Command | None:
        if not self.service.hook.refresh():
            return None
        ext = request.ext
        try:
            self.service.on_pull(str(ext["topic"]), int(ext["queueId"]), int(ext["queueOffset"]))
        except (KeyError, TypeError, ValueError):
            pass  # the handler answers a malformed request
        except Exception as exc:  # a refill failure must not fail the pull
            log.warning("priority_refill_failed", reason=repr(exc))
        return None


__all__ = [
    "PRIORITY_ATTRIBUTE",
    "PRIORITY_PREFIX",
    "PriorityHook",
    "PriorityInterceptor",
    "PriorityService",
    "level_topic",
    "priority_levels",
]
