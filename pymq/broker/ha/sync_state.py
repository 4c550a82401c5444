"""A master's sync-state set, time-based (RocketMQ 5 / RIP-44): which slaves are in sync. Pure.

**Catching up.** Each time the master streams its commitlog up to ``end`` it records a *mark*
``(end, now)`` for that slave (:meth:`SyncStateSet.sent`). When the slave's ACK reaches a mark's
``end``, the slave held, at that ack, everything the master had at the mark's time: it *caught
up* then (``caught_up_at`` is the newest such time; an ACK at the master's current end counts as
caught up now). Under a steady stream of writes a slave that keeps up catches up at every
batch, though its ack is never equal to the master's end at the instant it arrives.

**Membership** (:meth:`SyncStateSet.update`, run on every ACK, link change and a few times per
``window``). A connected slave

* *stays* in the set while it caught up within the last ``window`` seconds
  (``ha_max_time_slave_not_catchup_seconds``) and lags at most ``max_lag_bytes``;
* *joins* when it meets that and, besides, holds every write the master has acknowledged
  (``acked >= acknowledged``): a write acknowledged just before it caught up may lie beyond
  what it acked;
* *leaves* at once when its link drops.

**The set that counts** (:meth:`SyncStateSet.effective`). With a controller a slave may be
elected while the *controller* lists it, so the set a SYNC master waits for is the union of its
own set, the one the controller last answered (``confirmed``) and every set reported in a
heartbeat not answered yet (``pending``: the controller may be taking it now): a growth counts
at once (the joiner holds everything), a shrink only once the controller has answered. Until
the controller has confirmed a set once (``confirmed`` is None) nothing counts and
no write is acknowledged. The rule that makes an election safe (docs/REPLICATION.md, "The
sync-state set") is then: a SYNC master acknowledges a write only when *every* slave of that
union holds it (and at least ``in_sync_replicas`` of them do), see
:meth:`pymq.broker.ha.acks.AckWaiters.replicated_offset`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

#: how many marks a slave keeps (the oldest are dropped: a slave that far behind is not caught up)
MAX_MARKS: Final = 256


@dataclass(slots=True)
class SlaveProgress:
    """What the set needs of one connected slave (kept on its :class:`~pymq.broker.ha.acks.SlaveState`)."""

    #: the newest time the slave was seen holding everything the master had then
    caught_up_at: float = float("-inf")
    #: (master end streamed, when), ascending; popped as the slave's ACKs pass them
    marks: deque[tuple[int, float]] = field(default_factory=deque)


class SyncStateSet:
    """The master's sync-state set over its connected slaves (addresses)."""

    def __init__(self, window: float, max_lag_bytes: int, *, controlled: bool = False) -> None:
        self.window = window
        self.max_lag_bytes = max_lag_bytes
        #: slaves the master holds in sync now
        self.members: set[str] = set()
        #: a controller may elect a slave of this set (controller mode)
        self.controlled = controlled
        #: the controller's set (slaves) it last answered; None: not known yet (or no controller)
        self.confirmed: frozenset[str] | None = None
        #: slaves of the sets reported since that answer (the controller may have taken them)
        self.pending: set[str] = set()
        #: the end of the newest write acknowledged as replicated (a joiner must hold it)
        self.acknowledged = 0

    # --- the stream and the ACKs ------------------------------------------------------------------------------

    @staticmethod
    def sent(p: SlaveProgress, end: int, now: float) -> None:
        """The master streamed its commitlog up to ``end`` to this slave at ``now``."""
        marks = p.marks
        if marks and marks[-1][0] >= end:
            return
        marks.append((end, now))
        if len(marks) > MAX_MARKS:
            marks.popleft()

    @staticmethod
    def acked(p: SlaveProgress, offset: int, master_max: int, now: float) -> None:
        """The slave acknowledged holding ``offset`` (the master's end is ``master_max``)."""
        marks = p.marks
        while marks and marks[0][0] <= offset:
            _, at = marks.popleft()
            if at > p.caught_up_at:
                p.caught_up_at = at
        if offset >= master_max:
            p.caught_up_at = now

    # --- membership --------------------------------------------------------------------------------------------

    def in_sync(self, acked: int, p: SlaveProgress, master_max: int, now: float) -> bool:
        """Whether a slave at ``acked`` may be in the set (time and lag; a joiner also needs
        ``acknowledged``, see :meth:`update`)."""
        return now - p.caught_up_at < self.window and master_max - acked <= self.max_lag_bytes

    def update(self, slaves: Iterable[tuple[str, int, SlaveProgress]], master_max: int, now: float) -> bool:
        """Recompute the set from the connected slaves ``(address, acked, progress)``; True if it changed."""
        new: set[str] = set()
        for address, acked, p in slaves:
            if address in new or not self.in_sync(acked, p, master_max, now):
                continue
            if address in self.members or acked >= self.acknowledged:
                new.add(address)
        if new == self.members:
            return False
        self.members = new
        return True

    def reporting(self) -> list[str]:
        """The set to report to the controller now; it counts until the controller's next answer."""
        if self.controlled:
            self.pending |= self.members
        return sorted(self.members)

    def confirm(self, controller_set: Iterable[str]) -> None:
        """The controller answered that its set (slaves) is ``controller_set`` (having taken every
        report sent before, the heartbeats being sequential)."""
        self.confirmed = frozenset(controller_set)
        self.pending = set()

    @property
    def known(self) -> bool:
        """False while a controller's set is still unknown (nothing may be acknowledged)."""
        return not self.controlled or self.confirmed is not None

    def effective(self) -> set[str]:
        """The slaves a SYNC master must count: its set, and the controller's last answered one."""
        if self.confirmed is None:
            return self.members | self.pending
        return self.members | self.confirmed | self.pending

    def reported(self) -> list[str]:
        """What the master tells the controller: its own set."""
        return sorted(self.members)


__all__ = ["MAX_MARKS", "SlaveProgress", "SyncStateSet"]
