"""Client hooks: before/after every send and every listener call, with timing, results and errors."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pymq.client import (
    ConsumeEvent,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
    SendEvent,
    SendStatus,
)
from pymq.errors import NoRouteError
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


class Recorder:
    """Records every hook call; before_send stamps a trace property on the messages."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def before_send(self, event: SendEvent) -> None:
        self.calls.append(("before_send", event.kind))
        for m in event.messages:
            m.properties["traceparent"] = "00-trace-span-01"

    def after_send(self, event: SendEvent) -> None:
        self.calls.append(("after_send", event))

    def before_consume(self, event: ConsumeEvent) -> None:
        with self.lock:
            self.calls.append(("before_consume", len(event.messages)))

    def after_consume(self, event: ConsumeEvent) -> None:
        with self.lock:
            self.calls.append(("after_consume", event))


class Broken:
    def before_send(self, event: SendEvent) -> None:
        raise RuntimeError("hook bug")

    def after_send(self, event: SendEvent) -> None:
        raise RuntimeError("hook bug")


async def test_send_hooks_see_timing_results_and_errors(cluster: LocalCluster) -> None:
    await cluster.create_topic("orders", 2)
    rec = Recorder()
    async with Producer(cluster.namesrv_addr) as producer:
        producer.add_hook(Broken())  # a failing hook is logged, never fails the send
        producer.add_hook(rec)
        result = await producer.send(Message("orders", b"one"))
        await producer.send_batch([Message("orders", b"b1"), Message("orders", b"b2")])
        with pytest.raises(NoRouteError):
            await producer.send(Message("missing-topic", b"x"))
    kinds = [c for c in rec.calls if c[0] == "before_send"]
    assert kinds == [("before_send", "send"), ("before_send", "batch"), ("before_send", "send")]
    done = [e for name, e in rec.calls if name == "after_send"]
    assert isinstance(done[0], SendEvent) and done[0].result == result and done[0].error is None
    assert done[0].result.status is SendStatus.SEND_OK and done[0].elapsed > 0 and done[0].topic == "orders"
    assert done[1].kind == "batch" and len(done[1].messages) == 2 and done[1].result is not None
    assert isinstance(done[2].error, NoRouteError) and done[2].result is None
    # before_send ran before encoding: what it added travels with the message
    consumer = PullConsumer(cluster.namesrv_addr, "trace", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")
    async with consumer:
        async for msg in consumer:
            assert msg.properties.get("traceparent") == "00-trace-span-01"
            break


@pytest.mark.parametrize("blocking", [False, True], ids=["async-listener", "blocking-listener"])
async def test_consume_hooks_wrap_each_listener_call(cluster: LocalCluster, blocking: bool) -> None:
    """Before/after each listener call, with the result or the error and the time taken."""
    await cluster.create_topic("orders", 1)
    async with Producer(cluster.namesrv_addr) as producer:
        await producer.send(Message("orders", b"ok"))
        await producer.send(Message("orders", b"fail"))
    rec = Recorder()
    seen: list[MessageExt] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def handle_sync(msgs: list[MessageExt]) -> ConsumeResult:
        seen.extend(msgs)
        if len(seen) >= 2:
            loop.call_soon_threadsafe(done.set)
        if msgs[0].body == b"fail":
            raise ValueError("listener bug")
        return ConsumeResult.SUCCESS

    async def handle_async(msgs: list[MessageExt]) -> ConsumeResult:
        return handle_sync(msgs)

    consumer = PushConsumer(cluster.namesrv_addr, "hooks", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")
    consumer.register_listener(handle_sync if blocking else handle_async)
    consumer.add_hook(rec)
    async with consumer:
        await asyncio.wait_for(done.wait(), 20)
    with rec.lock:
        events = [e for name, e in rec.calls if name == "after_consume"]
        befores = [n for name, n in rec.calls if name == "before_consume"]
    assert isinstance(events[0], ConsumeEvent) and len(befores) == len(events) >= 2
    by_body = {e.messages[0].body: e for e in events}
    assert by_body[b"ok"].result is ConsumeResult.SUCCESS and by_body[b"ok"].error is None
    assert isinstance(by_body[b"fail"].error, ValueError) and by_body[b"fail"].result is None
    assert all(e.elapsed >= 0 and e.group == "hooks" for e in events)


async def test_pull_consumer_hooks_see_what_poll_hands_over(cluster: LocalCluster) -> None:
    """A pull consumer's hooks run once per poll that returns messages, with kind "receive"."""
    await cluster.create_topic("orders", 1)
    async with Producer(cluster.namesrv_addr) as producer:
        await producer.send_batch([Message("orders", b"a"), Message("orders", b"b")])
    rec = Recorder()
    consumer = PullConsumer(cluster.namesrv_addr, "pulled", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")
    consumer.add_hook(rec)
    async with consumer:
        got: list[MessageExt] = []
        while len(got) < 2:
            got += await consumer.poll(timeout=5.0)
        assert await consumer.poll(timeout=0.2) == []  # an empty poll calls no hook
    events = [e for name, e in rec.calls if name == "after_consume"]
    befores = [n for name, n in rec.calls if name == "before_consume"]
    assert sum(befores) == 2 and len(events) == len(befores) >= 1
    assert all(isinstance(e, ConsumeEvent) and e.kind == "receive" and e.group == "pulled" for e in events)
    assert [m.body for e in events for m in e.messages] == [b"a", b"b"]
    assert all(e.result == e.messages and e.error is None and e.elapsed >= 0 for e in events)
