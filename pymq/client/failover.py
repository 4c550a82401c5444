"""Clients during a failover (issue 32): when a broker's answer or silence means "fetch the routes
now", and how often that may happen. Pure: no sockets, no tasks (the client instance runs them).

* :func:`calls_for_refresh` — a connection to a broker that fails (refused, closed under a
  request, timed out) or an answer SERVICE_NOT_AVAILABLE (what a slave, a fenced or demoted
  master and a master whose controller lease lapsed answer a write, lock or pop) means the
  route may name an old master: the instance refreshes its routes at once instead of at the
  next ``poll_namesrv_interval_seconds`` (30 s).
* :class:`RefreshPacer` — at most one refresh starts per ``min_gap`` seconds, so a storm of
  failed sends asks the nameserver once per gap, not once per send.
* :class:`MasterWatch` — a refresh asked for by a failure that finds a group without a master
  (the old one dropped from the route, the new one not elected yet) asks for another, paced,
  for at most ``limit`` seconds: reads go on from the slave without failing, so no further
  failure would otherwise bring the new master into the route before the periodic refresh.
* :func:`moved_masters` — the broker names whose master address a route update changed (a new
  master after an election): the instance then heartbeats at once (the new master learns the
  producer and consumer groups) and tells its consumers (orderly ones lock their queues there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pymq.errors import ConnectError, ConnectionClosedError, RemoteError, RequestTimeoutError
from pymq.protocol.codes import ResponseCode
from pymq.protocol.route import MASTER_ID

__all__ = ["REFRESH_CODES", "MasterWatch", "RefreshPacer", "calls_for_refresh", "masterless", "moved_masters"]

#: answers meaning "not the master (now)": the slave gate's and the lease gate's refusals
REFRESH_CODES = frozenset({int(ResponseCode.SERVICE_NOT_AVAILABLE)})


def calls_for_refresh(exc: BaseException) -> bool:
    """Does this failure of a request to a broker call for fetching the routes at once?"""
    if isinstance(exc, ConnectError | ConnectionClosedError | RequestTimeoutError):
        return True
    return isinstance(exc, RemoteError) and exc.code in REFRESH_CODES


def moved_masters(before: Mapping[str, Mapping[int, str]], after: Mapping[str, Mapping[int, str]]) -> set[str]:
    """Broker names known ``before`` whose master (brokerId 0) is another address ``after``.

    A broker name seen for the first time has not moved; a master gone from the route (the
    group between two masters) is not a move either: the move is when the new one appears.
    """
    moved = set()
    for name, addrs in after.items():
        old = before.get(name)
        new = addrs.get(MASTER_ID)
        if old is not None and new is not None and old.get(MASTER_ID) != new:
            moved.add(name)
    return moved


def masterless(broker_addrs: Mapping[str, Mapping[int, str]]) -> set[str]:
    """Broker names routed without a master (brokerId 0)."""
    return {name for name, addrs in broker_addrs.items() if MASTER_ID not in addrs}


@dataclass(slots=True)
class MasterWatch:
    """Whether a failure's refresh that found a group without a master asks for another one."""

    #: seconds a group may stay without a master before the periodic refresh alone looks again
    limit: float
    #: when the refreshes first found a group without a master (None: every group has one)
    since: float | None = None

    def again(self, any_masterless: bool, now: float) -> bool:
        if not any_masterless:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since < self.limit


@dataclass(slots=True)
class RefreshPacer:
    """At most one route refresh per ``min_gap`` seconds (the instance runs one at a time)."""

    min_gap: float
    #: when the last refresh started (monotonic seconds)
    last_start: float = -math.inf

    def wait(self, now: float) -> float:
        """Seconds to wait before the next refresh may start."""
        return max(0.0, self.last_start + self.min_gap - now)

    def started(self, now: float) -> None:
        self.last_start = now
