"""The broker's role as one state machine: states, events and the transition table.

Every part of the broker that depends on the role (the write gate, the send path's SYNC_MASTER
wait, pulls that commit offsets, replication, registration, the master-only services) reads
it through one :class:`RoleMachine`, and only its :meth:`RoleMachine.fire` changes it, by a
row of :data:`TRANSITIONS` (h11's ``_state.py`` is the model). Pure: no asyncio, no I/O; the
steps that make a transition real (stop following, open the HA listener, start the master
services) are :mod:`pymq.broker.role.change`'s, and the parts that follow the role subscribe
to it (:meth:`RoleMachine.subscribe`).

States:

* ``MASTER``: takes writes, runs the master services, brokerId 0.
* ``SLAVE``: follows ``master_addr``, serves reads, refuses writes.
* ``FENCED``: a master that must not take writes (a switchover in progress, or a newer term
  seen elsewhere): refuses writes, runs no master services, still streams to its slaves.
* ``PROMOTING``: a slave or fenced master on its way to MASTER (the epoch file is being
  written, the HA listener opened); refuses writes until ``PROMOTED``.

``epoch`` is the term this broker last began or joined at a transition (the epoch file is
the record of every term; see :mod:`pymq.broker.ha.epoch_file`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pymq.config import BrokerConfig, BrokerRole


class RoleState(StrEnum):
    MASTER = "MASTER"
    SLAVE = "SLAVE"
    FENCED = "FENCED"
    PROMOTING = "PROMOTING"


class RoleEvent(StrEnum):
    #: a slave or fenced master begins to take over (epoch file, HA listener)
    PROMOTE = "promote"
    #: the takeover is done: a master of a new term
    PROMOTED = "promoted"
    #: the takeover failed part-way: back to the state it started from
    ABORT = "abort"
    #: a master changes its replication flavour (ASYNC_MASTER <-> SYNC_MASTER)
    RETUNE = "retune"
    #: a master stops taking writes
    FENCE = "fence"
    #: follow ``master_addr`` (a master or fenced master steps down; a slave changes master)
    DEMOTE = "demote"
    #: a fenced master takes writes again (a switchover abandoned)
    UNFENCE = "unfence"


#: (state, event) -> next state; a pair not listed is refused (:class:`RoleTransitionError`).
#: ``ABORT`` goes back to where ``PROMOTE`` came from (SLAVE or FENCED), so it is not a row.
TRANSITIONS: dict[tuple[RoleState, RoleEvent], RoleState] = {
    (RoleState.SLAVE, RoleEvent.PROMOTE): RoleState.PROMOTING,
    (RoleState.FENCED, RoleEvent.PROMOTE): RoleState.PROMOTING,
    (RoleState.PROMOTING, RoleEvent.PROMOTED): RoleState.MASTER,
    (RoleState.MASTER, RoleEvent.RETUNE): RoleState.MASTER,
    (RoleState.MASTER, RoleEvent.FENCE): RoleState.FENCED,
    (RoleState.FENCED, RoleEvent.UNFENCE): RoleState.MASTER,
    (RoleState.MASTER, RoleEvent.DEMOTE): RoleState.SLAVE,
    (RoleState.FENCED, RoleEvent.DEMOTE): RoleState.SLAVE,
    (RoleState.SLAVE, RoleEvent.DEMOTE): RoleState.SLAVE,
}

_MASTER_FLAVOURS = (BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER)


class RoleTransitionError(RuntimeError):
    """An event that the current state does not allow (a bug in the caller, or a refused request)."""


@dataclass(frozen=True, slots=True)
class Role:
    """One immutable reading of the broker's role; a transition makes a new one."""

    state: RoleState
    #: ASYNC_MASTER or SYNC_MASTER for a master (kept while FENCED), SLAVE for a slave
    flavour: BrokerRole
    broker_id: int
    #: the master a slave follows (its normal port); None for a master
    master_addr: str | None = None
    epoch: int = 0

    @property
    def writable(self) -> bool:
        """Whether this broker takes writes (and commits offsets, creates topics, runs the master services)."""
        return self.state is RoleState.MASTER

    @property
    def is_slave(self) -> bool:
        """Whether this broker follows a master (a promotion in progress still follows none and writes nothing)."""
        return self.state is RoleState.SLAVE or self.state is RoleState.PROMOTING

    @property
    def sync_master(self) -> bool:
        """A writable SYNC_MASTER: sends wait for in-sync replicas."""
        return self.state is RoleState.MASTER and self.flavour is BrokerRole.SYNC_MASTER

    @property
    def name(self) -> str:
        """What runtime info and the role-change answer report: the flavour, or FENCED / PROMOTING."""
        if self.state is RoleState.FENCED or self.state is RoleState.PROMOTING:
            return self.state.value
        return self.flavour.value


def initial_role(config: BrokerConfig) -> Role:
    """The role a broker starts in: SLAVE by ``role`` or a non-zero ``broker_id``, else MASTER."""
    if config.role is BrokerRole.SLAVE or config.broker_id != 0:
        return Role(RoleState.SLAVE, BrokerRole.SLAVE, config.broker_id or 1, config.master_addr)
    return Role(RoleState.MASTER, config.role, 0)


#: called with (old, new) after every transition, in subscription order
RoleObserver = Callable[[Role, Role], None]


class RoleMachine:
    """The broker's current :class:`Role`, changed only by :meth:`fire`; observers follow each change."""

    def __init__(self, role: Role) -> None:
        self.current = role
        #: ``current.sync_master``, kept as a plain attribute: every send reads it
        self.sync_master = role.sync_master
        self._observers: list[RoleObserver] = []
        #: where PROMOTE came from (ABORT returns there)
        self._before_promote: Role | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> RoleMachine:
        return cls(initial_role(config))

    def subscribe(self, observer: RoleObserver) -> None:
        self._observers.append(observer)

    def allows(self, event: RoleEvent) -> bool:
        return (event is RoleEvent.ABORT and self._before_promote is not None) or (
            (self.current.state, event) in TRANSITIONS
        )

    def fire(
        self,
        event: RoleEvent,
        *,
        flavour: BrokerRole | None = None,
        broker_id: int | None = None,
        master_addr: str | None = None,
        epoch: int | None = None,
    ) -> Role:
        """Apply ``event`` (with the fields it changes) and tell the observers; returns the new role."""
        old = self.current
        if event is RoleEvent.ABORT:
            if old.state is not RoleState.PROMOTING or self._before_promote is None:
                raise RoleTransitionError(f"cannot abort a promotion from {old.state.value}")
            new = self._before_promote
        else:
            target = TRANSITIONS.get((old.state, event))
            if target is None:
                raise RoleTransitionError(f"role event {event.value!r} is not allowed in state {old.state.value}")
            new = dataclasses.replace(old, state=target, **_changes(event, flavour, broker_id, master_addr, epoch))
        self._before_promote = old if event is RoleEvent.PROMOTE else None
        self.current = new
        self.sync_master = new.sync_master
        for observer in self._observers:
            observer(old, new)
        return new


def _changes(
    event: RoleEvent, flavour: BrokerRole | None, broker_id: int | None, master_addr: str | None, epoch: int | None
) -> dict[str, Any]:
    """The fields an event sets, checked: a master has id 0 and no master, a slave a non-zero id and one."""
    out: dict[str, Any] = {}
    if epoch is not None:
        out["epoch"] = epoch
    if event is RoleEvent.PROMOTED or event is RoleEvent.RETUNE:
        if flavour not in _MASTER_FLAVOURS:
            raise RoleTransitionError(f"{event.value} needs a master flavour (ASYNC_MASTER or SYNC_MASTER)")
        out.update(flavour=flavour, broker_id=0, master_addr=None)
    elif event is RoleEvent.DEMOTE:
        if not master_addr:
            raise RoleTransitionError("demote needs the master address to follow")
        if broker_id is None or broker_id <= 0:
            raise RoleTransitionError("demote needs a slave broker id (> 0)")
        out.update(flavour=BrokerRole.SLAVE, broker_id=broker_id, master_addr=master_addr)
    return out


__all__ = [
    "TRANSITIONS",
    "Role",
    "RoleEvent",
    "RoleMachine",
    "RoleObserver",
    "RoleState",
    "RoleTransitionError",
    "initial_role",
]
