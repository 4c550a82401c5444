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
