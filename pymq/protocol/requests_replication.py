"""Replication request headers (issue 16): the role change a controller or admin sends a broker.

Re-exported by :mod:`pymq.protocol.requests`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pymq.protocol.wire_header import Header, bounded, wire_header


@wire_header
@dataclass(slots=True, kw_only=True)
class BrokerRoleChangeRequest(Header):
    """NOTIFY_BROKER_ROLE_CHANGED: the broker takes ``role``.

    ``ASYNC_MASTER``/``SYNC_MASTER``: a slave becomes its group's master (brokerId 0) with a
    new term, epoch above every one it knows and at least ``epoch``. ``SLAVE``: follow
    ``master_addr`` as ``broker_id`` (-1: keep a slave's id, a master takes 1). ``FENCED``: a
    master stops taking writes and stops registering, but keeps streaming to its slaves (the
    first step of a switchover). The answer's body is the broker's new replication state.
    """

    role: str
    master_addr: str = ""
    epoch: int = bounded(0, lo=0)
    broker_id: int = bounded(-1, lo=-1)


@wire_header
@dataclass(slots=True, kw_only=True)
class ControllerHeartbeatRequest(Header):
    """CONTROLLER_HEARTBEAT: a broker in controller mode tells the controller where it stands.

    ``role``: the broker's role state (MASTER, SLAVE, FENCED, PROMOTING); ``starting``: its first
    heartbeat, before it serves (a master is refused if its group's master is alive). A master's
    body is ``{"syncSet": [slave addresses in sync]}``. The answer is a :class:`ControllerAssignment`.
    """

    cluster_name: str
    broker_name: str
    broker_addr: str
    role: str
    epoch: int = bounded(0, lo=0)
    max_offset: int = bounded(0, lo=0)
    priority: int = bounded(0, lo=-1000, hi=1000)
    starting: bool = False


@wire_header
@dataclass(slots=True, kw_only=True)
class ControllerAssignment(Header):
    """The answer to a heartbeat: ``role`` MASTER (hold the mastership at ``epoch`` for
    ``lease_ms`` from the heartbeat's sending) or SLAVE of ``master_addr`` as ``broker_id``
    (``master_addr`` empty: the group has no master yet)."""

    role: str
    master_addr: str = ""
    epoch: int = bounded(0, lo=0)
    broker_id: int = bounded(-1, lo=-1)
    lease_ms: int = bounded(0, lo=0)
    #: MASTER: the controller's sync-state set for this master, its slaves' addresses joined by ","
    sync_state_set: str = ""


@wire_header
@dataclass(slots=True, kw_only=True)
class ControllerElectRequest(Header):
    """CONTROLLER_ELECT_MASTER (pymq-admin elect-master): move ``broker_name``'s mastership to
    ``broker_addr`` (empty: the best other live in-sync replica) once the master's lease lapsed.
    The answer's body is the group's state after the election."""

    broker_name: str
    broker_addr: str = ""
