"""SYNC_MASTER bookkeeping: which slaves hold what, and the sends waiting for them (no I/O).

Each connected slave reports the commitlog offset it holds (ACK frames). The *replicated
offset* is the ``in_sync_replicas``-th highest of the offsets reported by in-sync slaves
(lag at most ``max_lag_bytes``): every byte below it is on enough slaves. A SYNC_MASTER
send waits until the replicated offset reaches the end of its records.

Waiting sends form one queue in arrival order. Sends are stored one after another on the
event loop, so their end offsets and deadlines both ascend along the queue: an ack
resolves a prefix of it, and the timeout check looks at its head only (the service keeps
one timer, for the head's deadline, not one per send).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

#: what a waiting send learns
REPLICATED = 0
TIMED_OUT = 1


@dataclass(slots=True)
class SlaveState:
    """One connected slave as the master sees it (also what runtime info reports)."""

    address: str
    broker_id: int
    #: commitlog offset the slave reported holding
    acked: int = 0
    connected_at: float = 0.0
    last_ack_at: float = 0.0


@dataclass
class AckWaiters:
    """Slaves' acked offsets and the sends waiting for them; ``Future``-like objects are resolved."""

    in_sync_replicas: int = 1
    max_lag_bytes: int = 256 * 1024 * 1024
    slaves: dict[int, SlaveState] = field(default_factory=dict)
    #: (end offset, deadline, future), ascending in both
    waiting: deque[tuple[int, float, Any]] = field(default_factory=deque)
    replicated: int = 0

    def in_sync(self, master_max: int) -> list[SlaveState]:
        return [s for s in self.slaves.values() if master_max - s.acked <= self.max_lag_bytes]

    def replicated_offset(self, master_max: int) -> int:
        """The offset below which at least ``in_sync_replicas`` in-sync slaves hold everything (0: none)."""
        acks = sorted((s.acked for s in self.in_sync(master_max)), reverse=True)
        k = self.in_sync_replicas
        return acks[k - 1] if len(acks) >= k else 0

    def can_wait(self, master_max: int) -> bool:
        """Whether enough slaves are in sync for a send to be worth waiting for."""
        return len(self.in_sync(master_max)) >= self.in_sync_replicas

    def add(self, end: int, deadline: float, fut: Any) -> None:
        self.waiting.append((end, deadline, fut))

    def advance(self, master_max: int) -> int:
        """Resolve the sends the slaves now hold (REPLICATED); returns how many."""
        self.replicated = rep = self.replicated_offset(master_max)
        waiting = self.waiting
        done = 0
        while waiting and waiting[0][0] <= rep:
            _, _, fut = waiting.popleft()
            if not fut.done():
                fut.set_result(REPLICATED)
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
