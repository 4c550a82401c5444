"""Producer retry and failover against scripted MockBrokers (real loopback transport, no cluster)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from pymq.client.producer import Producer, SendStatus
from pymq.client.selectors import LatencyAwareSelector, RoundRobinSelector
from pymq.errors import MessageIllegalError, NoRouteError, RequestTimeoutError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.message import Message
from pymq.protocol.route import MessageQueue
from pymq.testing import FakeClock, MockBroker

SEND = RequestCode.SEND_MESSAGE


@pytest.fixture
async def brokers() -> AsyncIterator[tuple[MockBroker, MockBroker]]:
    """broker-a (also the nameserver) and broker-b, one queue each for topic "orders"."""
    async with MockBroker("broker-a") as a, MockBroker("broker-b") as b:
        a.add_topic("orders", [a, b], queues=1)
        yield a, b


def first_a() -> RoundRobinSelector:
    """Round robin whose first pick is queue 0 (broker-a's)."""
    return RoundRobinSelector(start=-1)


async def test_send_goes_to_the_selected_broker_and_reports_its_offsets(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, b = brokers
    async with Producer(a.address, selector=first_a()) as producer:
        first = await producer.send(Message("orders", b"one"))
        second = await producer.send(Message("orders", b"two"))
    assert first.status is SendStatus.SEND_OK and first.message_queue == MessageQueue("orders", "broker-a", 0)
    assert second.message_queue == MessageQueue("orders", "broker-b", 0)
    assert first.store_addr == a.address and first.queue_offset == 0
    assert len(a.stored("orders")) == 1 and len(b.stored("orders")) == 1


async def test_retriable_failure_is_retried_on_another_broker(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, b = brokers
    a.script(SEND, MockBroker.error(ResponseCode.SYSTEM_ERROR))
    async with Producer(a.address, selector=first_a(), retry_times=2) as producer:
        result = await producer.send(Message("orders", b"x"))
    assert result.message_queue.brokerName == "broker-b"
    assert len(a.requests_of(SEND)) == 1 and len(b.requests_of(SEND)) == 1
    # The retry carries the very same record (same unique id).
    assert a.requests_of(SEND)[0].body_bytes() == b.requests_of(SEND)[0].body_bytes()


async def test_dropped_connection_fails_over_to_the_other_broker(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, b = brokers
    await a.close()  # broker-a is gone; the route still names it
    async with MockBroker("namesrv") as ns:
        ns.add_topic("orders", [a, b], queues=1)
        async with Producer(ns.address, selector=first_a()) as producer:
            result = await producer.send(Message("orders", b"x"))
    assert result.message_queue.brokerName == "broker-b"


async def test_non_retriable_error_is_not_retried(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, b = brokers
    a.script(SEND, MockBroker.error(ResponseCode.MESSAGE_ILLEGAL, "bad message"))
    async with Producer(a.address, selector=first_a(), retry_times=2) as producer:
        with pytest.raises(MessageIllegalError):
            await producer.send(Message("orders", b"x"))
    assert len(a.requests_of(SEND)) == 1 and b.requests_of(SEND) == []


async def test_retries_stop_after_retry_times(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, b = brokers
    a.on(SEND, MockBroker.error(ResponseCode.SYSTEM_BUSY))
    b.on(SEND, MockBroker.error(ResponseCode.SYSTEM_BUSY))
    async with Producer(a.address, selector=first_a(), retry_times=2) as producer:
        with pytest.raises(Exception, match="scripted error"):
            await producer.send(Message("orders", b"x"))
    assert len(a.requests_of(SEND)) + len(b.requests_of(SEND)) == 3


async def test_total_send_timeout_is_respected(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, b = brokers
    a.on(SEND, MockBroker.drop())
    b.on(SEND, MockBroker.drop())
    async with Producer(a.address, selector=first_a(), retry_times=5, send_timeout=0.3) as producer:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await producer.send(Message("orders", b"x"))
        elapsed = time.monotonic() - started
    # One budget for every attempt: the first attempt used it all, so no retry was started.
    assert 0.25 <= elapsed < 1.0
    assert len(a.requests_of(SEND)) + len(b.requests_of(SEND)) == 1


async def test_slow_answers_share_the_budget(brokers: tuple[MockBroker, MockBroker]) -> None:
    """A broker that fails after 0.2 s leaves 0.1 s of a 0.3 s budget for the retry elsewhere."""
    a, b = brokers
    a.script(SEND, MockBroker.delay(0.2, MockBroker.error(ResponseCode.SYSTEM_ERROR)))
    b.on(SEND, MockBroker.drop())
    async with Producer(a.address, selector=first_a(), send_timeout=0.3) as producer:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await producer.send(Message("orders", b"x"))
        assert time.monotonic() - started < 0.8
    assert len(b.requests_of(SEND)) == 1


async def test_latency_aware_selector_avoids_a_failing_broker_until_it_recovers(
    brokers: tuple[MockBroker, MockBroker],
) -> None:
    a, _b = brokers
    clock = FakeClock()
    selector = LatencyAwareSelector(clock=clock, start=-1)
    a.script(SEND, MockBroker.error(ResponseCode.SYSTEM_BUSY))
    async with Producer(a.address, selector=selector) as producer:
        first = await producer.send(Message("orders", b"x"))  # a fails (busy), retried on b
        assert first.message_queue.brokerName == "broker-b"
        later = [await producer.send(Message("orders", b"y")) for _ in range(6)]
        assert {r.message_queue.brokerName for r in later} == {"broker-b"}  # a is avoided
        clock.advance(31)  # past the isolation window (30 s)
        after = [await producer.send(Message("orders", b"z")) for _ in range(6)]
    assert {r.message_queue.brokerName for r in after} == {"broker-a", "broker-b"}
    assert len(a.requests_of(SEND)) == 1 + sum(r.message_queue.brokerName == "broker-a" for r in after)


async def test_unknown_topic_uses_the_auto_create_template(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, b = brokers
    a.add_topic("TBW102", [a, b], queues=8)
    async with Producer(a.address, selector=first_a()) as producer:
        queues = await producer.queues_for("new-topic")
        result = await producer.send(Message("new-topic", b"x"))
    assert len(queues) == 8 and {q.brokerName for q in queues} == {"broker-a", "broker-b"}
    assert result.message_queue.topic == "new-topic"


async def test_no_route_at_all_is_reported(brokers: tuple[MockBroker, MockBroker]) -> None:
    a, _ = brokers
    async with Producer(a.address) as producer:
        with pytest.raises(NoRouteError):
            await producer.send(Message("nowhere", b"x"))


async def test_a_route_change_reaches_the_producer_through_the_instance_cache(
    brokers: tuple[MockBroker, MockBroker],
) -> None:
    """The producer keeps no route copy: a refreshed route is used by the next send."""
    a, b = brokers
    async with Producer(a.address, selector=first_a()) as producer:
        assert len(await producer.queues_for("orders")) == 2
        a.add_topic("orders", [b], queues=3)
        assert producer.instance is not None
        await producer.instance.refresh_routes()
        queues = await producer.queues_for("orders")
    assert queues == [MessageQueue("orders", "broker-b", i) for i in range(3)]


async def test_a_fenced_masters_refusal_makes_the_producer_fetch_the_route_again(
    brokers: tuple[MockBroker, MockBroker],
) -> None:
    """SERVICE_NOT_AVAILABLE (a fenced master, a slave, a lapsed lease: issue 32) drops the cached
    route at once: the next send asks the nameserver instead of waiting for the 30 s refresh."""
    a, _b = brokers
    route = RequestCode.GET_ROUTEINFO_BY_TOPIC
    async with Producer(a.address, selector=first_a(), retry_times=2) as producer:
        await producer.send(Message("orders", b"warm"), queue=MessageQueue("orders", "broker-b", 0))
        fetched = len(a.requests_of(route))
        a.script(SEND, MockBroker.error(ResponseCode.SERVICE_NOT_AVAILABLE, "master lease lapsed: not the master now"))
        result = await producer.send(Message("orders", b"x"))
        assert result.message_queue.brokerName == "broker-b"
        await producer.send(Message("orders", b"y"))
    assert len(a.requests_of(route)) > fetched
