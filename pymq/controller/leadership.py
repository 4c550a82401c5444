"""Which of several controllers is active, and when the active one must step down. Pure.

Controllers sharing one etcd campaign for a leadership key bound to an etcd lease (see
:mod:`.etcd_campaign`); the one whose transaction created the key is *active*, the others are
*standby* and name it. The active controller counts its own lease on its local monotonic clock
from the moment it *sent* the grant or keepalive that etcd answered: etcd counts the same TTL
from when it received that request (later), so the local deadline passes first, and the
controller stops deciding (:meth:`Leadership.active`) before etcd may let another win.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

ACTIVE = "active"
STANDBY = "standby"
#: the ext key (and status field) naming the active controller in a standby's answers
ACTIVE_CONTROLLER = "activeController"


@dataclass
class Leadership:
    """This controller's view of the campaign, on an injected clock."""

    clock: Callable[[], float]
    #: this controller's address (what a standby names to brokers and admins)
    me: str
    #: the address of the active controller as last seen (self.me while this one is active)
    leader: str | None = None
    #: local monotonic deadline of this controller's leadership lease (0: not active)
    deadline: float = 0.0
    #: takeovers by this controller since it started
    takeovers: int = 0

    def active(self) -> bool:
        """True while this controller holds the leadership and its lease has not lapsed locally."""
        return self.deadline > 0 and self.clock() < self.deadline

    def won(self, sent: float, ttl: float) -> None:
        """The campaign transaction created the key (or found it bound to this controller's lease):
        active until ``sent + ttl`` unless renewed."""
        self.leader = self.me
        self.deadline = sent + ttl
        self.takeovers += 1

    def renewed(self, sent: float, ttl: float) -> None:
        """A keepalive sent at ``sent`` was answered with ``ttl`` seconds left (0: the lease is gone)."""
        if self.deadline <= 0:
            return
        if ttl <= 0:
            self.deadline = 0.0
            self.leader = None
            return
        self.deadline = max(self.deadline, sent + ttl)

    def lost(self, leader: str | None) -> None:
        """Another controller holds the key (``leader``; None: no one, or unknown)."""
        self.deadline = 0.0
        self.leader = leader if leader != self.me else None

    def must_step_down(self) -> bool:
        """Active until now but the lease lapsed locally: stop deciding, campaign again."""
        return self.deadline > 0 and self.clock() >= self.deadline

    def step_down(self) -> None:
        self.deadline = 0.0
        if self.leader == self.me:
            self.leader = None

    @property
    def role(self) -> str:
        return ACTIVE if self.active() else STANDBY

    def refusal(self) -> str:
        """What a standby answers to a heartbeat or an operator's election."""
        if self.leader is not None and self.leader != self.me:
            return f"standby controller {self.me}: the active controller is {self.leader}"
        return f"standby controller {self.me}: no active controller known (campaign under way)"


__all__ = ["ACTIVE", "ACTIVE_CONTROLLER", "STANDBY", "Leadership"]
