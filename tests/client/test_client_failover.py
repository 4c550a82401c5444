"""Clients during a failover (issue 32): the pure decisions of :mod:`pymq.client.failover`, the
route cache noticing a new master, and a producer against scripted MockBrokers (loopback, no
cluster) moving to a new master at once, with the route refresh debounced."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from pymq.client.failover import MasterWatch, RefreshPacer, calls_for_refresh, masterless, moved_masters
from pymq.client.producer import Producer, SendStatus
from pymq.client.routes import AUTO_CREATE_TOPIC, RouteCache
from pymq.errors import (
    ConnectError,
    ConnectionClosedError,
    MessageIllegalError,
    RequestTimeoutError,
    ServiceNotAvailableError,
    SystemBusyError,
    TopicNotExistError,
    error_for_response,
)
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.message import Message
from pymq.protocol.route import MASTER_ID, BrokerData, QueueData, TopicRouteData
from pymq.testing import MockBroker
from tests.helpers import wait_until

SEND = RequestCode.SEND_MESSAGE
ROUTE = RequestCode.GET_ROUTEINFO_BY_TOPIC
LAPSED = "master lease lapsed: not the master now"


# --- the pure decisions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "refresh"),
    [
        (ConnectError("refused"), True),
        (ConnectionClosedError("closed"), True),
        (RequestTimeoutError("slow"), True),
        (error_for_response(ResponseCode.SERVICE_NOT_AVAILABLE, LAPSED), True),
        (ServiceNotAvailableError(ResponseCode.SERVICE_NOT_AVAILABLE, "broker is a slave"), True),
        (SystemBusyError(ResponseCode.SYSTEM_BUSY), False),
        (TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST), False),
        (MessageIllegalError(ResponseCode.MESSAGE_ILLEGAL), False),
        (ValueError("not a broker failure"), False),
    ],
)
def test_which_failures_call_for_a_route_refresh(exc: BaseException, refresh: bool) -> None:
    assert calls_for_refresh(exc) is refresh


def test_moved_masters_names_groups_whose_master_is_another_address() -> None:
    before = {"a": {MASTER_ID: "m:1", 1: "s:1"}, "b": {MASTER_ID: "m:2"}, "c": {1: "s:3"}}
    after = {
        "a": {MASTER_ID: "s:1"},  # the slave elected
        "b": {MASTER_ID: "m:2"},  # unchanged
        "c": {MASTER_ID: "s:3"},  # a master again after a gap with none
        "d": {MASTER_ID: "m:4"},  # first seen: not a move
    }
    assert moved_masters(before, after) == {"a", "c"}
    # the master gone from the route (between two masters) is not a move yet
    assert moved_masters(before, {"a": {1: "s:1"}}) == set()
    assert moved_masters({}, after) == set()


def test_the_pacer_allows_one_refresh_per_gap() -> None:
    pacer = RefreshPacer(0.5)
    assert pacer.last_start == -math.inf and pacer.wait(100.0) == 0.0
    pacer.started(100.0)
    assert pacer.wait(100.1) == pytest.approx(0.4)
    assert pacer.wait(100.5) == 0.0 and pacer.wait(200.0) == 0.0


def test_a_group_without_a_master_is_looked_at_again_for_a_while() -> None:
    assert masterless({"a": {1: "s:1"}, "b": {MASTER_ID: "m:2"}}) == {"a"}
    watch = MasterWatch(limit=20.0)
    assert watch.again(False, 0.0) is False
    assert watch.again(True, 1.0) is True and watch.since == 1.0
    assert watch.again(True, 20.9) is True
    assert watch.again(True, 21.0) is False  # the periodic refresh takes over
    assert watch.again(False, 22.0) is False and watch.since is None  # a master again: the next gap is watched
    assert watch.again(True, 100.0) is True


def _route(master: str, slave: str | None = None) -> TopicRouteData:
    addrs = {MASTER_ID: master} if master else {}
    if slave:
        addrs[1] = slave
    return TopicRouteData(queueDatas=[QueueData("broker-a", 2, 2, 6)], brokerDatas=[BrokerData("c", "broker-a", addrs)])


async def _no_fetch(topic: str) -> TopicRouteData | None:
    raise AssertionError("not fetched in this test")


def test_the_route_cache_reports_a_new_master_of_a_known_group() -> None:
    cache = RouteCache(_no_fetch)
    seen: list[set[str]] = []
    cache.on_master_moved = seen.append
    cache.put("t", _route("m:1", "s:1"))  # first sight
    cache.put("t", _route("m:1", "s:1"))  # no change
    cache.put("t", _route("", "s:1"))  # the old master dropped: no master yet
    assert seen == []
    cache.put("t", _route("s:1"))
    assert seen == [{"broker-a"}]


async def test_a_recent_route_without_writable_queues_is_not_fetched_again_within_the_gap() -> None:
    """Between two masters every send would ask the nameserver: at most once per gap instead."""
    fetched: list[float] = []
    now = [0.0]

    async def fetch(topic: str) -> TopicRouteData | None:
        fetched.append(now[0])
        return _route("", "s:1")

    cache = RouteCache(fetch, min_gap=0.5, clock=lambda: now[0])
    for t in (0.0, 0.1, 0.4):
        now[0] = t
        assert await cache.write_queues("t") == []
    now[0] = 0.6
    assert await cache.write_queues("t") == []
    assert fetched == [0.0, 0.6]
    cache.forget_write_queues("t")  # an explicit forget fetches at once
    await cache.write_queues("t")
    assert fetched == [0.0, 0.6, 0.6]


async def test_a_topic_the_nameserver_no_longer_routes_is_sent_through_the_template() -> None:
    """A promoted slave that had not copied a new topic yet: the nameserver has no route for it;
    sends stop trusting the cached route (the dead master) and go to the template's brokers."""
    routes: dict[str, TopicRouteData | None] = {"t": _route("m:1", "s:1"), AUTO_CREATE_TOPIC: _route("s:1")}

    async def fetch(topic: str) -> TopicRouteData | None:
        return routes[topic]

    cache = RouteCache(fetch, min_gap=0.5)
    assert [q.brokerName for q in await cache.write_queues("t")] == ["broker-a", "broker-a"]
    assert cache.master_addr("broker-a") == "m:1"
    routes["t"] = None
    assert await cache.update("t") is None
    assert cache.cached_write_queues("t") is None and cache.route("t") is not None  # kept for reads
    queues = await cache.write_queues("t")
    assert [(q.topic, q.brokerName) for q in queues] == [("t", "broker-a")] * 2
    assert cache.master_addr("broker-a") == "s:1"


# --- a producer moving to a new master ------------------------------------------------------------------


async def test_a_refusal_moves_the_producer_to_the_new_master_without_the_periodic_refresh() -> None:
    """poll_namesrv_interval_seconds stays at its 30 s default: the old master's SERVICE_NOT_AVAILABLE
    makes the instance fetch the route at once, the retry of the same send goes to the new master,
    and the new master gets the producer's heartbeat at once."""
    async with MockBroker("namesrv") as ns, MockBroker("broker-a") as old, MockBroker("broker-a") as new:
        ns.add_topic("orders", [old], queues=2)
        async with Producer(ns.address, retry_times=2) as producer:
            assert (await producer.send(Message("orders", b"before"))).store_addr == old.address
            old.on(SEND, MockBroker.error(ResponseCode.SERVICE_NOT_AVAILABLE, LAPSED))
            ns.add_topic("orders", [new], queues=2)  # the controller elected the slave
            started = time.monotonic()
            result = await producer.send(Message("orders", b"after"))
            took = time.monotonic() - started
            assert result.status is SendStatus.SEND_OK and result.store_addr == new.address
            assert len(old.requests_of(SEND)) == 2 and len(new.requests_of(SEND)) == 1
            assert took < 1.0, took
            await wait_until(lambda: bool(new.requests_of(RequestCode.HEART_BEAT)), timeout=2)


async def test_a_dead_master_moves_the_producer_within_its_send_budget() -> None:
    async with MockBroker("namesrv") as ns, MockBroker("broker-a") as new:
        dead = MockBroker("broker-a")
        await dead.start()
        ns.add_topic("orders", [dead], queues=2)
        async with Producer(ns.address, retry_times=2) as producer:
            await producer.send(Message("orders", b"before"))
            await dead.close()  # kill: connections drop, connects are refused
            ns.add_topic("orders", [new], queues=2)
            result = await producer.send(Message("orders", b"after"))
    assert result.store_addr == new.address


async def test_a_storm_of_failed_sends_asks_the_nameserver_once_per_gap() -> None:
    """50 concurrent sends against a master that refuses while the nameserver still names it:
    the routes are fetched a handful of times (one refresh in flight, one per 0.5 s), not per send."""
    async with MockBroker("namesrv") as ns, MockBroker("broker-a") as old:
        ns.add_topic("orders", [old], queues=2)
        async with Producer(ns.address, retry_times=2, send_timeout=1.5) as producer:
            await producer.send(Message("orders", b"warm"))
            old.on(SEND, MockBroker.error(ResponseCode.SERVICE_NOT_AVAILABLE, LAPSED))
            fetched = len(ns.requests_of(ROUTE))
            started = time.monotonic()
            results = await asyncio.gather(
                *(producer.send(Message("orders", b"x")) for _ in range(50)), return_exceptions=True
            )
            elapsed = time.monotonic() - started
    assert all(isinstance(r, ServiceNotAvailableError) for r in results), results
    refreshes = len(ns.requests_of(ROUTE)) - fetched
    # 3 attempts each: the first refresh at once, then one per 0.5 s gap while they retry
    assert 1 <= refreshes <= 2 + elapsed / 0.5, (refreshes, elapsed)
    assert len(old.requests_of(SEND)) == 1 + 50 * 3
