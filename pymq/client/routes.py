"""The client's one copy of route data, owned by the client instance.

Producers ask it for a topic's writable queues, consumers for its readable queues, and
everyone for a broker's address. Queue lists are views derived from the route on first
use and dropped whenever the topic's route is replaced, so nobody keeps a copy that must be
kept in sync: the producer's hot path is one dict lookup (``RouteCache.cached_write_queues``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from pymq.client.failover import moved_masters
from pymq.protocol.requests import AUTO_CREATE_TOPIC
from pymq.protocol.route import MASTER_ID, PERM_READ, MessageQueue, TopicRouteData, perm_writable

__all__ = ["AUTO_CREATE_TOPIC", "RouteCache", "read_queues", "write_queues"]

RouteFetcher = Callable[[str], Awaitable[TopicRouteData | None]]


def write_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The topic's writable queues: brokers sorted by name, each contributing queue ids
    ``0..writeQueueNums-1``, skipping brokers without write permission or without a master."""
    result: list[MessageQueue] = []
    for qd in sorted(route.queueDatas, key=lambda q: q.brokerName):
        if not perm_writable(qd.perm):
            continue
        bd = route.broker(qd.brokerName)
        if bd is None or MASTER_ID not in bd.brokerAddrs:
            continue
        result.extend(MessageQueue(topic, qd.brokerName, i) for i in range(qd.writeQueueNums))
    return result


def read_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Every readable queue of the topic, sorted by (topic, brokerName, queueId)."""
    out: list[MessageQueue] = []
    for qd in route.queueDatas:
        if qd.perm & PERM_READ and route.broker(qd.brokerName) is not None:
            out.extend(MessageQueue(topic, qd.brokerName, i) for i in range(qd.readQueueNums))
    return sorted(out)


class RouteCache:
    """Topic routes and broker addresses, fetched through ``fetch`` (the nameserver client).

    :attr:`version` grows with every route replaced, for holders of derived data that want
    to know whether to recompute it.
    """

    def __init__(
        self, fetch: RouteFetcher, *, min_gap: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fetch = fetch
        #: :meth:`write_queues` fetches a topic with no writable queue at most once per ``min_gap`` s
        #: (between two masters every send would ask the nameserver otherwise)
        self.min_gap = min_gap
        self.clock = clock
        self._fetched_at: dict[str, float] = {}
        #: topics the nameserver last said it has no route for (their cached route, if any, is not sent to)
        self._missing: set[str] = set()
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.version = 0
        self._write: dict[str, list[MessageQueue]] = {}
        #: broker name -> its master's address, kept by :meth:`put` with ``broker_addrs``
        self._masters: dict[str, str] = {}
        #: ``master_addr(broker_name)``: the master's address or None, what ``broker_addr`` answers
        #: with ``master_only``. The send hot path: the dict's own ``get`` (the dict is never replaced).
        self.master_addr: Callable[[str], str | None] = self._masters.get
        self._read: dict[str, list[MessageQueue]] = {}
        #: ``cached_write_queues(topic)``: the writable queues a previous :meth:`write_queues`
        #: found, or None. The send hot path: the dict's own ``get`` (the dict is never replaced).
        self.cached_write_queues: Callable[[str], list[MessageQueue] | None] = self._write.get
        #: called with the broker names whose master a route just replaced names another address
        self.on_master_moved: Callable[[set[str]], None] | None = None

    # --- routes ------------------------------------------------------------------------------------------

    def route(self, topic: str) -> TopicRouteData | None:
        return self.routes.get(topic)

    async def update(self, topic: str) -> TopicRouteData | None:
        """Fetch ``topic``'s route now; None when it has none (the cached route is kept for reads,
        but sends no longer trust it: they go through the auto-create template, as for a new topic)."""
        self._fetched_at[topic] = self.clock()
        route = await self._fetch(topic)
        if route is not None:
            self._missing.discard(topic)
            self.put(topic, route)
        else:
            self._missing.add(topic)
            self._write.pop(topic, None)
        return route

    async def get(self, topic: str) -> TopicRouteData | None:
        """The cached route, fetched on first use."""
        return self.routes.get(topic) or await self.update(topic)

    def put(self, topic: str, route: TopicRouteData) -> None:
        """Replace ``topic``'s route; its derived queue lists are recomputed on next use."""
        self.routes[topic] = route
        known = {
            bd.brokerName: self.broker_addrs[bd.brokerName]
            for bd in route.brokerDatas
            if bd.brokerName in self.broker_addrs
        }
        for bd in route.brokerDatas:
            addrs = self.broker_addrs[bd.brokerName] = dict(bd.brokerAddrs)
            master = addrs.get(MASTER_ID)
            if master is not None:
                self._masters[bd.brokerName] = master
            else:
                self._masters.pop(bd.brokerName, None)
        self._write.pop(topic, None)
        self._read.pop(topic, None)
        self.version += 1
        if known and self.on_master_moved is not None:
            moved = moved_masters(known, self.broker_addrs)
            if moved:
                self.on_master_moved(moved)

    def forget_write_queues(self, topic: str) -> None:
        """Make the next send to ``topic`` fetch its route again (its broker may be gone)."""
        self._write.pop(topic, None)
        self._fetched_at.pop(topic, None)

    # --- queues ------------------------------------------------------------------------------------------

    async def write_queues(self, topic: str) -> list[MessageQueue]:
        """``topic``'s writable queues, fetching its route if needed.

        A topic without a route gets the auto-create template topic's brokers (at most 4
        queues each), like RocketMQ: the broker creates the topic on the first send if it
        allows it. Empty when there is nothing to send to.
        """
        queues = self._write.get(topic)
        if queues:
            return queues
        route = None if topic in self._missing else self.routes.get(topic)
        if route is None or self.clock() - self._fetched_at.get(topic, -self.min_gap) >= self.min_gap:
            route = await self.update(topic)
        if route is not None:
            queues = write_queues(topic, route)
        else:
            template = await self.update(AUTO_CREATE_TOPIC)
            queues = []
            if template is not None:
                per_broker: dict[str, int] = {}
                for q in write_queues(AUTO_CREATE_TOPIC, template):
                    per_broker[q.brokerName] = per_broker.get(q.brokerName, 0) + 1
                queues = [MessageQueue(topic, b, i) for b, n in sorted(per_broker.items()) for i in range(min(4, n))]
        if queues:
            self._write[topic] = queues
        return queues

    def cached_read_queues(self, topic: str) -> list[MessageQueue] | None:
        """``topic``'s readable queues from the cached route; None when no route is cached."""
        queues = self._read.get(topic)
        if queues is None:
            route = self.routes.get(topic)
            if route is None:
                return None
            queues = self._read[topic] = read_queues(topic, route)
        return queues

    async def read_queues(self, topic: str) -> list[MessageQueue]:
        """``topic``'s readable queues, fetching its route on first use; empty without a route."""
        queues = self.cached_read_queues(topic)
        if queues is None:
            await self.update(topic)
            queues = self.cached_read_queues(topic)
        return queues or []

    # --- brokers -----------------------------------------------------------------------------------------

    def broker_addr(self, broker_name: str, *, master_only: bool = True) -> str | None:
        """The broker's master address; with ``master_only=False`` a slave's when there is no master."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        if master_only:
            return None
        return addrs[min(addrs)]

    def pull_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> tuple[str, bool] | None:
        """Where to pull ``broker_name``'s queues from: ``(address, is_slave)``, None without any address.

        RocketMQ's ``findBrokerAddressInSubscribe(name, id, onlyThisBroker=false)``: the
        suggested broker id, else (a slave id) the next one, else the master, else the
        lowest-id slave — so reads go on from a slave while the master is gone from the route.
        """
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is not None:
            return addr, broker_id != MASTER_ID
        if broker_id != MASTER_ID:
            addr = addrs.get(broker_id + 1)
            if addr is not None:
                return addr, True
        if MASTER_ID in addrs:
            return addrs[MASTER_ID], False
        return addrs[min(addrs)], True

    def all_broker_addrs(self) -> list[str]:
        return sorted({a for addrs in self.broker_addrs.values() for a in addrs.values()})
