"""Timer takeover: a promoted slave carries on delivering its old master's timers (issue 16).

A slave keeps no timer files; it copies its master's delivery state (GET_TIMER_CHECK_POINT:
cursor, filing offsets, merge index; :func:`master_state` builds it on the master) into
``masterTimerCheckpoint.json`` about every second. A service starting without a checkpoint of
its own but with that copy (:meth:`Takeover.load`) files the timer topic again from its first
entry, skipping what the old master had delivered (:meth:`Takeover.refile`): a plain timer the
master had filed (below its filing offset) in a slot before its cursor; a merged-delay message
below the master's filing offset unless it is the first message of a window still open in the
copied merge index. What the master delivered after the last copy is delivered again
(at-least-once, about a second's worth).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pymq.broker.timer.checkpoint import TimerCheckpoint
from pymq.broker.timer.hook import MERGE_QUEUE, PLAIN_QUEUE, TIMER_TOPIC
from pymq.broker.timer.timer_log import FLAG_MERGE, TimerUnit
from pymq.logs import get_logger

if TYPE_CHECKING:
    from pymq.broker.store import MessageStore
    from pymq.broker.timer.timer_store import TimerFiles

log = get_logger("broker.timer")

#: between the real topic and the merge key in a merge index key ("<topic>\x01<key>")
MERGE_SEP = "\x01"


class TimerState(Protocol):
    """What the takeover sees of the timer service (:class:`~pymq.broker.timer.service.TimerService`)."""

    files: TimerFiles | None
    precision_ms: int
    cursor_ms: int
    queue_offsets: dict[int, int]
    #: merged delay: "<topic>\x01<key>" -> [deliver_ms, last phys, last size, merged count]
    merge: dict[str, list[int]]
    pending_by_topic: dict[str, int]
    #: the units of the slot being fired, and those filed late into it, not delivered yet
    firing: list[TimerUnit]
    late: list[TimerUnit]

    def file_unit(self, deliver_ms: int, phys: int, size: int, flags: int) -> None: ...

    def count_pending(self, topic: str, n: int) -> None: ...

    def merge_key_at(self, phys: int) -> str | None: ...


class Takeover:
    """The old master's copied delivery state, while the new master files the timer topic again."""

    def __init__(self, master: TimerCheckpoint) -> None:
        self.master = master

    @classmethod
    async def load(cls, path: Path, store: MessageStore) -> Takeover | None:
        """The copy at ``path`` (read in a thread), or None if there is none to take over from."""
        master = await asyncio.to_thread(TimerCheckpoint.load, path)
        if master is not None and master.cursor_ms < 0:
            master = None
        if master is None:
            if has_timer_entries(store):
                log.warning("timer_takeover_without_master_checkpoint")  # past-due timers go out again
            return None
        # What this store lacks of the master's (a failover) was never filed here: file it as new.
        offs = master.queue_offsets
        for q in (PLAIN_QUEUE, MERGE_QUEUE):
            offs[q] = min(offs.get(q, 0), store.max_offset(TIMER_TOPIC, q))
        return cls(master)

    def filed_by_master(self, qid: int, offset: int) -> bool:
        """Whether the old master had filed entry ``offset`` of timer queue ``qid``."""
        return offset < self.master.queue_offsets.get(qid, 0)

    def done(self, queue_offsets: Mapping[int, int]) -> bool:
        """Whether filing got past everything the old master had filed."""
        return all(queue_offsets.get(q, 0) >= o for q, o in self.master.queue_offsets.items())

    def refile(self, svc: TimerState, qid: int, deliver_ms: int, phys: int, size: int, topic: str) -> None:
        """File an entry the old master had filed, unless it delivered it already."""
        take = self.master
        files = svc.files
        assert files is not None
        if qid == PLAIN_QUEUE:
            if files.wheel.slot_of(deliver_ms) >= take.cursor_ms:
                svc.file_unit(deliver_ms, phys, size, 0)
                svc.count_pending(topic, 1)
            return
        key = svc.merge_key_at(phys)
        if key is None:
            if files.wheel.slot_of(deliver_ms) >= take.cursor_ms:
                svc.file_unit(deliver_ms, phys, size, 0)
            return
        window = take.merge.get(key)
        # Only the first message of a window still open at the copy is filed (later ones merged into it).
        if window is not None and window[0] == deliver_ms and key not in svc.merge:
            svc.merge[key] = list(window)
            svc.file_unit(deliver_ms, phys, size, FLAG_MERGE)
            svc.count_pending(key.partition(MERGE_SEP)[0], 1)


def master_state(svc: TimerState) -> dict[str, Any]:
    """GET_TIMER_CHECK_POINT's body: what a slave needs to take delivery over."""
    cursor = svc.cursor_ms if svc.files is not None or svc.cursor_ms > 0 else -1
    floor = min((u.deliver_ms for u in (*svc.firing, *svc.late)), default=None)
    if floor is not None and cursor >= 0:
        # Units filed late into the slot being fired are due before it: a taker-over must not
        # count them delivered (it skips units due before the cursor).
        cursor = min(cursor, floor - floor % svc.precision_ms)
    return TimerCheckpoint(
        queue_offsets=dict(svc.queue_offsets),
        cursor_ms=cursor,
        merge={k: list(v) for k, v in svc.merge.items()},
        pending_by_topic={t: n for t, n in svc.pending_by_topic.items() if n > 0},
    ).to_json()


def has_timer_entries(store: MessageStore) -> bool:
    return any(store.max_offset(TIMER_TOPIC, q) > 0 for q in (PLAIN_QUEUE, MERGE_QUEUE))
