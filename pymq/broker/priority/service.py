"""The refill of priority topics' queues from their level queues (a master-only service; see the package)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.priority.hook import PriorityHook
from pymq.broker.priority.levels import (
    PERSIST_INTERVAL,
    PRIORITY_GROUP,
    PRIORITY_PREFIX,
    is_level_topic,
    level_topic,
    priority_levels,
)
from pymq.broker.store.config_files import read_json, remove_json, write_json_atomic
from pymq.broker.store.results import GetStatus, PutStatus
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.logs import get_logger
from pymq.protocol.record import iter_spans, parse_record, reencode
from pymq.tasks import cancel_and_wait

if TYPE_CHECKING:
    from pymq.broker.hosts import OffsetsDeliveryHost as PriorityHost

log = get_logger("broker.priority")


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

    def drop_state(self) -> None:
        """Forget the refill positions (a slave's or demoted master's are stale): its file and memory."""
        remove_json(self.path)
        self.offsets.clear()

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
            # Aged messages take a bounded share of the batch: under a backlog older than the limit they
            # still move (oldest first, so none waits forever) while the rest of each batch keeps priority.
            aged_room = min(want, max(1, math.ceil(want * cfg.priority_aged_share)))
            while len(picks) < aged_room:
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
