"""pymq.otel: spans by the messaging semantic conventions, trace context carried in message properties."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pymq.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
)
from pymq.errors import NoRouteError
from pymq.otel import instrument_consumer, instrument_producer
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def spans_named(exporter: InMemorySpanExporter, name: str, count: int = 1) -> list[ReadableSpan]:
    """The finished spans called ``name``, waiting (a consumer span ends just after its listener returns)."""
    for _ in range(200):
        found = [s for s in exporter.get_finished_spans() if s.name == name]
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {count} span(s) {name!r} in {[s.name for s in exporter.get_finished_spans()]}")


async def test_send_and_process_spans_share_the_trace(
    cluster: LocalCluster, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = tracing
    tracer = provider.get_tracer("app")
    await cluster.create_topic("orders", 1)
    async with Producer(cluster.namesrv_addr, "shop") as producer:
        instrument_producer(producer, provider)
        result = await producer.send(Message("orders", b"hello", tags="created", keys=["order-1"]))

    got: list[MessageExt] = []
    done = asyncio.Event()

    async def handle(msgs: list[MessageExt]) -> ConsumeResult:
        with tracer.start_as_current_span("work"):  # the listener's own span nests under "process"
            got.extend(msgs)
        done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(cluster.namesrv_addr, "billing", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")
    consumer.register_listener(handle)
    instrument_consumer(consumer, provider)
    async with consumer:
        await asyncio.wait_for(done.wait(), 20)
        [process] = await spans_named(exporter, "process orders")
    [send] = await spans_named(exporter, "send orders")
    [work] = await spans_named(exporter, "work")

    assert got[0].properties["traceparent"].split("-")[1] == f"{send.context.trace_id:032x}"
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert work.parent is not None and work.parent.span_id == process.context.span_id
    assert send.attributes is not None and process.attributes is not None
    assert dict(send.attributes) == {
        "messaging.system": "rocketmq",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "orders",
        "messaging.rocketmq.client_group": "shop",
        "messaging.client.id": producer.instance.client_id,  # type: ignore[union-attr]
        "messaging.rocketmq.message.tag": "created",
        "messaging.rocketmq.message.keys": ("order-1",),
        "messaging.rocketmq.message.type": "normal",
        "messaging.message.body.size": 5,
        "messaging.message.id": result.msg_id,
    }
    assert process.attributes["messaging.operation.name"] == "process"
    assert process.attributes["messaging.consumer.group.name"] == "billing"
    assert process.attributes["messaging.rocketmq.consumption_model"] == "clustering"
    assert process.attributes["messaging.message.id"] == result.msg_id
    assert process.attributes["messaging.rocketmq.message.tag"] == "created"
    assert "messaging.batch.message_count" not in process.attributes
    assert send.status.status_code is StatusCode.UNSET and process.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("blocking", [False, True], ids=["async-listener", "blocking-listener"])
async def test_listener_error_marks_the_process_span(
    cluster: LocalCluster, tracing: tuple[TracerProvider, InMemorySpanExporter], blocking: bool
) -> None:
    provider, exporter = tracing
    await cluster.create_topic("orders", 1)
    async with Producer(cluster.namesrv_addr) as producer:
        instrument_producer(producer, provider)
        await producer.send(Message("orders", b"boom"))
        await producer.send(Message("orders", b"later"))

    def handle_sync(msgs: list[MessageExt]) -> ConsumeResult:
        if msgs[0].body == b"boom":
            raise ValueError("listener bug")
        return ConsumeResult.RECONSUME_LATER

    async def handle_async(msgs: list[MessageExt]) -> ConsumeResult:
        return handle_sync(msgs)

    consumer = PushConsumer(cluster.namesrv_addr, "billing", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")
    consumer.register_listener(handle_sync if blocking else handle_async)
    instrument_consumer(consumer, provider)
    async with consumer:
        spans = await spans_named(exporter, "process orders", 2)
    sends = {s.context.span_id: s for s in exporter.get_finished_spans() if s.name == "send orders"}
    by_body = {sends[s.parent.span_id].attributes["messaging.message.id"]: s for s in spans if s.parent}  # type: ignore[index]
    assert len(by_body) == 2
    failed = [s for s in spans if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 2
    raised = next(s for s in failed if s.attributes and s.attributes["error.type"] == "ValueError")
    assert raised.status.description == "listener bug"
    assert [e.name for e in raised.events] == ["exception"]
    later = next(s for s in failed if s.attributes and s.attributes["error.type"] == "RECONSUME_LATER")
    assert later.events == ()


async def test_failed_send_marks_the_send_span(
    cluster: LocalCluster, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = tracing
    async with Producer(cluster.namesrv_addr) as producer:
        instrument_producer(producer, provider)
        with pytest.raises(NoRouteError):
            await producer.send(Message("missing-topic", b"x"))
    [send] = await spans_named(exporter, "send missing-topic")
    assert send.status.status_code is StatusCode.ERROR and send.attributes is not None
    assert send.attributes["error.type"] == "NoRouteError"


async def test_pull_consumer_receive_span_links_the_batch(
    cluster: LocalCluster, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """A poll that returns messages is a "receive" span, child of the caller's span, linked to the sends."""
    provider, exporter = tracing
    await cluster.create_topic("orders", 1)
    async with Producer(cluster.namesrv_addr) as producer:
        instrument_producer(producer, provider)
        await producer.send_batch([Message("orders", b"a"), Message("orders", b"b")])
        await producer.send(Message("orders", b"c"))
    consumer = PullConsumer(cluster.namesrv_addr, "reports", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")
    instrument_consumer(consumer, provider)
    got: list[MessageExt] = []
    async with consumer:
        with provider.get_tracer("app").start_as_current_span("report") as report:
            while len(got) < 3:
                got += await consumer.poll(timeout=5.0)
    sends = [s for s in exporter.get_finished_spans() if s.name == "send orders"]
    batch = next(s for s in sends if s.attributes and s.attributes.get("messaging.batch.message_count") == 2)
    receives = [s for s in exporter.get_finished_spans() if s.name == "receive orders"]
    assert receives and all(s.kind is SpanKind.CONSUMER for s in receives)
    assert all(s.parent is not None and s.parent.span_id == report.get_span_context().span_id for s in receives)
    linked = [link.context.span_id for s in receives for link in s.links]
    assert sorted(linked) == sorted([batch.context.span_id] * 2 + [s.context.span_id for s in sends if s != batch])
    assert sum(s.attributes["messaging.batch.message_count"] for s in receives if s.attributes) == 3


@pytest.mark.parametrize("module", ["pymq.client", "pymq.client.sync"])
def test_sdk_does_not_import_opentelemetry(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert [m for m in json.loads(out.stdout) if m.split(".")[0] == "opentelemetry" or m == "pymq.otel"] == []


def test_sdk_works_without_opentelemetry_installed() -> None:
    """With opentelemetry unimportable the SDK still imports and builds clients; only pymq.otel fails."""
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from pymq.client import Producer, PushConsumer\n"
        "Producer('127.0.0.1:9876'); PushConsumer('127.0.0.1:9876', 'g').subscribe('t')\n"
        "try:\n    import pymq.otel\nexcept ImportError:\n    print('no otel')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "no otel"


async def test_sync_facade_clients_are_instrumented(
    cluster: LocalCluster, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    from pymq.client import sync

    provider, exporter = tracing
    await cluster.create_topic("orders", 1)

    def run() -> tuple[str, list[MessageExt]]:
        with sync.Producer(cluster.namesrv_addr) as producer:
            instrument_producer(producer, provider)
            msg = Message("orders", b"blocking")
            producer.send(msg)
        consumer = sync.PullConsumer(cluster.namesrv_addr, "sync", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe("orders")
        instrument_consumer(consumer, provider)
        with consumer:
            got = consumer.poll(timeout=10.0)
        return msg.properties["traceparent"], got

    traceparent, got = await asyncio.to_thread(run)
    [send] = await spans_named(exporter, "send orders")
    [receive] = await spans_named(exporter, "receive orders")
    assert traceparent.split("-")[2] == f"{send.context.span_id:016x}" and got[0].body == b"blocking"
    assert receive.attributes is not None and receive.attributes["messaging.consumer.group.name"] == "sync"
    assert [link.context.span_id for link in receive.links] == [send.context.span_id]


async def test_batch_process_span_is_a_root_linked_to_each_message(
    cluster: LocalCluster, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """A listener call with several messages links them all and does not nest under the span that started it."""
    provider, exporter = tracing
    await cluster.create_topic("orders", 1)
    async with Producer(cluster.namesrv_addr) as producer:
        instrument_producer(producer, provider)
        await producer.send_batch([Message("orders", b"a"), Message("orders", b"b")])
    done = asyncio.Event()

    async def handle(msgs: list[MessageExt]) -> None:
        done.set()

    consumer = PushConsumer(
        cluster.namesrv_addr, "billing", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, consume_batch_max_size=2
    )
    consumer.subscribe("orders")
    consumer.register_listener(handle)
    instrument_consumer(consumer, provider)
    with provider.get_tracer("app").start_as_current_span("startup"):
        await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 20)
        [process] = await spans_named(exporter, "process orders")
    finally:
        await consumer.close()
    [send] = await spans_named(exporter, "send orders")
    assert process.parent is None and process.attributes is not None
    assert process.attributes["messaging.batch.message_count"] == 2
    assert [link.context.span_id for link in process.links] == [send.context.span_id] * 2
    assert "messaging.message.id" not in process.attributes
