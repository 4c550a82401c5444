"""Per-(group, queue) locks for orderly consumption (RocketMQ's RebalanceLockManager).

A lock is granted when the queue is free, already held by the same client, or its holder
has not renewed it for longer than the expiry (60 s). Locks live only on masters. Times
come from an injected :class:`~pymq.clock.Clock` (or a plain ``() -> seconds`` callable), so
tests drive expiry without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.protocol.route import MessageQueue

if TYPE_CHECKING:
    from pymq.config import BrokerConfig


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update: float


class QueueLockManager:
    def __init__(self, expiry_seconds: float = 60.0, clock: Clock | Callable[[], float] = SYSTEM_CLOCK) -> None:
        self.expiry_seconds = expiry_seconds
        #: monotonic seconds now
        self.clock: Callable[[], float] = clock.monotonic if isinstance(clock, Clock) else clock
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def configure(self, config: BrokerConfig) -> None:
        """Follow the live broker config (see :class:`~pymq.broker.runtime_config.RuntimeConfig`)."""
        self.expiry_seconds = config.queue_lock_expiry_seconds

    def _expired(self, entry: LockEntry, now: float) -> bool:
        return now - entry.last_update > self.expiry_seconds

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock (or renew) what can be locked; returns the queues now held by ``client_id``."""
        now = self.clock()
        locks = self.table.setdefault(group, {})
        granted = set()
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                locks[mq] = LockEntry(client_id, now)
                granted.add(mq)
        return granted

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        locks = self.table.get(group)
        if not locks:
            return
        for mq in mqs:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        entry = self.table.get(group, {}).get(mq)
        return entry is not None and entry.client_id == client_id and not self._expired(entry, self.clock())

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        entry = self.table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, self.clock()):
            return None
        return entry.client_id
