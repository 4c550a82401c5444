"""SYNC_MASTER bookkeeping: which slaves hold what, and the sends waiting for them (no I/O).

Each connected slave reports the commitlog offset it holds (ACK frames); which slaves are in
sync is the time-based :class:`~pymq.broker.ha.sync_state.SyncStateSet` (``sync``). The
*replicated offset* is what a SYNC_MASTER send waits for (every byte below it counts as held
by enough slaves):

* without a controller: the ``in_sync_replicas``-th highest of the offsets the slaves of the
  set acknowledged;
* in controller mode (``controlled``): the lowest offset among *all* the slaves of the set that
  counts (the master's set and the controller's, :meth:`SyncStateSet.effective`), provided
  there are at least ``in_sync_replicas`` of them, all connected; 0 while the controller's set
  is unknown. So every slave the controller may elect holds every acknowledged write.

Waiting sends form one queue in arrival order. Sends are stored one after another on the
event loop, so their end offsets and deadlines both ascend along the queue: an ack
resolves a prefix of it, and the timeout check looks at its head only (the service keeps
one timer, for the head's deadline, not one per send).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from pymq.broker.ha.sync_state import SlaveProgress, SyncStateSet

#: what a waiting send learns (``PENDING``: queued, its waiter learns one of the two later)
REPLICATED = 0
TIMED_OUT = 1
PENDING = 2


class Waiter(Protocol):
    """What waits for a send's replication: a future, or anything answering like one."""

    def done(self) -> bool: ...

    def set_result(self, outcome: int, /) -> None: ...


@dataclass(slots=True)
class SlaveState:
    """One connected slave as the master sees it (also what runtime info reports)."""

    address: str
    broker_id: int
    #: commitlog offset the slave reported holding
    acked: int = 0
    connected_at: float = 0.0
    last_ack_at: float = 0.0
    #: catch-up marks and time, for the sync-state set
    progress: SlaveProgress = field(default_factory=SlaveProgress)


@dataclass
class AckWaiters:
    """Slaves' acked offsets and the sends waiting for them; ``Future``-like objects are resolved."""

    in_sync_replicas: int = 1
    max_lag_bytes: int = 256 * 1024 * 1024
    #: ``ha_max_time_slave_not_catchup_seconds``
    window: float = 15.0
    #: controller mode: every slave of the set that counts must hold a write
    controlled: bool = False
    slaves: dict[int, SlaveState] = field(default_factory=dict)
    #: (end offset, deadline, future), ascending in both
    waiting: deque[tuple[int, float, Any]] = field(default_factory=deque)
    replicated: int = 0
    #: the highest offset any slave ever acknowledged: no slave holds more (a send ending past
    #: it waits without working out the replicated offset)
    top: int = 0

    def __post_init__(self) -> None:
        self.sync = SyncStateSet(self.window, self.max_lag_bytes, controlled=self.controlled)

    # --- the slaves -----------------------------------------------------------------------------------------

    def connect(self, link: int, state: SlaveState, master_max: int, now: float) -> bool:
        """A slave joined at ``state.acked``; True if the set changed."""
        self.slaves[link] = state
        self.top = max(self.top, state.acked)
        self.sync.acked(state.progress, state.acked, master_max, now)
        return self.refresh(master_max, now)

    def disconnect(self, link: int, master_max: int, now: float) -> bool:
        """A slave's link dropped (it leaves the set at once); True if the set changed."""
        self.slaves.pop(link, None)
        return self.refresh(master_max, now)

    def sent(self, state: SlaveState, end: int, now: float) -> None:
        """The master streamed up to ``end`` to this slave."""
        self.sync.sent(state.progress, end, now)

    def ack(self, state: SlaveState, offset: int, master_max: int, now: float) -> bool:
        """The slave holds ``offset``: resolve what it completes; True if the set changed."""
        state.last_ack_at = now
        if offset > state.acked:
            state.acked = offset
            if offset > self.top:
                self.top = offset
        self.sync.acked(state.progress, offset, master_max, now)
        changed = self.refresh(master_max, now)
        if self.waiting:
            self.advance(master_max)
        return changed

    def refresh(self, master_max: int, now: float) -> bool:
        """Recompute the sync-state set (time passes: a slave not caught up leaves); True if changed."""
        return self.sync.update(((s.address, s.acked, s.progress) for s in self.slaves.values()), master_max, now)

    def confirm(self, controller_set: list[str], master_max: int) -> None:
        """The controller's set (slaves) as it answered: a shrink counts from now on."""
        self.sync.confirm(controller_set)
        if self.waiting:
            self.advance(master_max)

    def in_sync(self) -> list[SlaveState]:
        """The connected slaves of the master's sync-state set (one per address)."""
        members = self.sync.members
        seen: dict[str, SlaveState] = {}
        for s in self.slaves.values():
            if s.address in members and (s.address not in seen or s.acked > seen[s.address].acked):
                seen[s.address] = s
        return list(seen.values())

    # --- the sends --------------------------------------------------------------------------------------------

    def replicated_offset(self, master_max: int = 0) -> int:
        """The offset below which the slaves that count hold everything (0: none, see the module doc).

        (``master_max`` is not needed: kept for callers that pass it.)"""
        sync = self.sync
        k = self.in_sync_replicas
        if not sync.known:
            return 0
        if not self.controlled:
            acks = sorted((s.acked for s in self.in_sync()), reverse=True)
            return acks[k - 1] if len(acks) >= k else 0
        counted = sync.effective()
        if len(counted) < k:
            return 0
        best: dict[str, int] = {}
        for s in self.slaves.values():
            if s.address in counted:
                best[s.address] = max(best.get(s.address, 0), s.acked)
        if len(best) < len(counted):
            return 0  # a slave the controller may elect is not connected: nothing more is acknowledged
        return min(best.values())

    def can_wait(self, master_max: int = 0) -> bool:
        """Whether enough slaves are in sync for a send to be worth waiting for."""
        if not self.sync.known:
            return False
        return len(self.sync.effective() if self.controlled else self.sync.members) >= self.in_sync_replicas

    def acknowledged(self, end: int) -> None:
        """A send ending at ``end`` was answered as replicated (a slave joining the set must hold it)."""
        if end > self.sync.acknowledged:
            self.sync.acknowledged = end

    def add(self, end: int, deadline: float, fut: Any) -> None:
        self.waiting.append((end, deadline, fut))

    def advance(self, master_max: int) -> int:
        """Resolve the sends the slaves now hold (REPLICATED); returns how many."""
        self.replicated = rep = self.replicated_offset(master_max)
        waiting = self.waiting
        done = 0
        while waiting and waiting[0][0] <= rep:
            end, _, fut = waiting.popleft()
            if not fut.done():
                fut.set_result(REPLICATED)
                self.acknowledged(end)
            done += 1
        return done

    def expire(self, now: float) -> float | None:
        """Resolve the sends past their deadline (TIMED_OUT); returns the next deadline, if any."""
        waiting = self.waiting
        while waiting and waiting[0][1] <= now:
            _, _, fut = waiting.popleft()
            if not fut.done():
                fut.set_result(TIMED_OUT)
        return waiting[0][1] if waiting else None

    def fail_all(self) -> None:
        """Resolve every waiting send as timed out (the master stops or stops being master)."""
        while self.waiting:
            _, _, fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(TIMED_OUT)
