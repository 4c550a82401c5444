"""OpenTelemetry tracing for pymq clients (``pip install 'pymq-rocket[otel]'``): spans and trace context.

    from pymq.otel import instrument_consumer, instrument_producer

    instrument_producer(producer)            # before or after start()
    instrument_consumer(push_consumer)       # before start(); a PullConsumer at any time

Spans follow the OpenTelemetry messaging semantic conventions (with RocketMQ's part of
them: pymq speaks RocketMQ's model, so ``messaging.system`` is ``"rocketmq"`` and the
``messaging.rocketmq.*`` attributes apply):

* every send is a PRODUCER span ``send <topic>``; its context is injected into each
  message's properties as W3C trace context (``traceparent``, ``tracestate``, through the
  propagator, by default the global one), so it is the messages' creation context;
* every listener call of a push consumer is a CONSUMER span ``process <topic>``: a child of
  the message's creation context when it handles one message, linked to every message's
  creation context when it handles several; it is the current span while the listener
  runs, so the listener's own spans nest under it;
* every ``poll()`` of a pull consumer that returns messages is a CONSUMER span ``receive
  <topic>``, a child of the caller's current span, linked to the messages' creation contexts.

A send or listener that raises, or a listener that answers RECONSUME_LATER /
SUSPEND_CURRENT_QUEUE_A_MOMENT, ends its span with status ERROR and ``error.type``.

This module is the only one that imports ``opentelemetry``; ``import pymq.client`` never
imports it, and pymq works without it installed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer, TracerProvider

from pymq.client.consumer_types import ConsumeOrderlyResult, ConsumeResult, MessageModel
from pymq.client.hooks import ConsumeEvent, SendEvent
from pymq.protocol.message import Message, MessageExt

__all__ = ["ConsumeTracing", "SendTracing", "instrument_consumer", "instrument_producer"]

#: ``messaging.system``: pymq implements RocketMQ's model (topics, tags, keys, groups, queues)
MESSAGING_SYSTEM = "rocketmq"

# Attribute names of the messaging semantic conventions (kept here: the semconv package is not a dependency).
SYSTEM = "messaging.system"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION = "messaging.destination.name"
CONSUMER_GROUP = "messaging.consumer.group.name"
#: deprecated for consumers (messaging.consumer.group.name) but the only name for a producer's group
CLIENT_GROUP = "messaging.rocketmq.client_group"
CLIENT_ID = "messaging.client.id"
BATCH_COUNT = "messaging.batch.message_count"
MESSAGE_ID = "messaging.message.id"
BODY_SIZE = "messaging.message.body.size"
TAG = "messaging.rocketmq.message.tag"
KEYS = "messaging.rocketmq.message.keys"
MESSAGE_TYPE = "messaging.rocketmq.message.type"
DELAY_LEVEL = "messaging.rocketmq.message.delay_time_level"
CONSUMPTION_MODEL = "messaging.rocketmq.consumption_model"
ERROR_TYPE = "error.type"

#: what a listener answers when the messages were not consumed
_FAILED_RESULTS = frozenset({ConsumeResult.RECONSUME_LATER, ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT})


def _tracer(tracer_provider: TracerProvider | None) -> Tracer:
    import pymq

    return trace.get_tracer("pymq", pymq.__version__, tracer_provider)


def _client_id(client: Any) -> str | None:
    instance = getattr(client, "instance", None)
    return getattr(instance, "client_id", None)


def _end_with_error(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_attribute(ERROR_TYPE, type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__qualname__))
    span.end()


def _message_attributes(attrs: dict[str, Any], tags: str | None, keys: Sequence[str], body: bytes) -> None:
    if tags:
        attrs[TAG] = tags
    if keys:
        attrs[KEYS] = list(keys)
    attrs[BODY_SIZE] = len(body)


class _Spans:
    """The open span of each event, between its before and after hook (consumers call them on many threads)."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[Span, Token[Context] | None]] = {}
        self._lock = threading.Lock()

    def put(self, event: object, span: Span, token: Token[Context] | None = None) -> None:
        with self._lock:
            self._open[id(event)] = (span, token)

    def pop(self, event: object) -> tuple[Span, Token[Context] | None] | None:
        with self._lock:
            return self._open.pop(id(event), None)

    def __len__(self) -> int:
        return len(self._open)


class SendTracing:
    """A producer's SendHook: a PRODUCER span per send, its context injected into the messages."""

    def __init__(self, tracer: Tracer, propagator: TextMapPropagator | None = None, client: Any = None) -> None:
        self.tracer = tracer
        self.propagator = propagator
        self.client = client
        self.spans = _Spans()

    def _propagator(self) -> TextMapPropagator:
        return self.propagator or propagate.get_global_textmap()

    def before_send(self, event: SendEvent) -> None:
        propagator = self._propagator()
        msgs: Sequence[Message] = event.messages
        attrs: dict[str, Any] = {
            SYSTEM: MESSAGING_SYSTEM,
            OPERATION_NAME: "send",
            OPERATION_TYPE: "send",
            DESTINATION: event.topic,
            CLIENT_GROUP: event.group,
        }
        client_id = _client_id(self.client)
        if client_id:
            attrs[CLIENT_ID] = client_id
        if event.kind == "batch":
            attrs[BATCH_COUNT] = len(msgs)
        else:
            msg = msgs[0]
            _message_attributes(attrs, msg.tags, msg.key_list(), msg.body)
            attrs[MESSAGE_TYPE] = "delay" if msg.delay_level > 0 else "normal"
            if msg.delay_level > 0:
                attrs[DELAY_LEVEL] = msg.delay_level
        # A message that already carries a trace context (sent before, or set by the caller)
        # gets this send's context instead, linked to the one it had.
        links = [Link(ctx) for ctx in _creation_contexts(propagator, msgs)]
        span = self.tracer.start_span(f"send {event.topic}", kind=SpanKind.PRODUCER, attributes=attrs, links=links)
        ctx = trace.set_span_in_context(span)
        for msg in msgs:
            propagator.inject(msg.properties, context=ctx)
        self.spans.put(event, span)

    def after_send(self, event: SendEvent) -> None:
        opened = self.spans.pop(event)
        if opened is None:
            return
        span = opened[0]
        if event.error is not None:
            _end_with_error(span, event.error)
            return
        result = event.result
        if result is not None and event.kind != "batch":
            span.set_attribute(MESSAGE_ID, result.msg_id)
        span.end()


class ConsumeTracing:
    """A consumer's ConsumeHook: a CONSUMER span per listener call (``process``) or poll (``receive``)."""

    def __init__(
        self,
        tracer: Tracer,
        propagator: TextMapPropagator | None = None,
        client: Any = None,
        message_model: MessageModel | None = None,
    ) -> None:
        self.tracer = tracer
        self.propagator = propagator
        self.client = client
        self.message_model = message_model
        self.spans = _Spans()

    def before_consume(self, event: ConsumeEvent) -> None:
        propagator = self.propagator or propagate.get_global_textmap()
        msgs: list[MessageExt] = event.messages
        operation = event.kind  # "process" (push listener) or "receive" (pull poll)
        topic = msgs[0].topic
        attrs: dict[str, Any] = {
            SYSTEM: MESSAGING_SYSTEM,
            OPERATION_NAME: operation,
            OPERATION_TYPE: operation,
            DESTINATION: topic,
            CONSUMER_GROUP: event.group,
            CLIENT_GROUP: event.group,
        }
        client_id = _client_id(self.client)
        if client_id:
            attrs[CLIENT_ID] = client_id
        if self.message_model is not None:
            attrs[CONSUMPTION_MODEL] = self.message_model.value.lower()
        if operation == "receive" or len(msgs) != 1:
            attrs[BATCH_COUNT] = len(msgs)
        if len(msgs) == 1:
            msg = msgs[0]
            attrs[MESSAGE_ID] = msg.msg_id
            _message_attributes(attrs, msg.tags, msg.keys, msg.body)
        creation = _creation_contexts(propagator, msgs)
        parent: Context | None = None  # receive: a child of the poller's current span
        if operation == "process":
            # One message pushed to the listener continues the producer's trace; a batch starts
            # its own (linked to each message's), not under whatever span started the consumer.
            single = len(msgs) == 1 and creation
            parent = trace.set_span_in_context(trace.NonRecordingSpan(creation[0])) if single else Context()
        start = time.time_ns() - int((time.perf_counter() - event.started) * 1e9)
        span = self.tracer.start_span(
            f"{operation} {topic}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attrs,
            links=[Link(c) for c in creation],
            start_time=start,
        )
        # The listener runs next, on this thread (or in this task): its spans nest under this one.
        token = otel_context.attach(trace.set_span_in_context(span)) if operation == "process" else None
        self.spans.put(event, span, token)

    def after_consume(self, event: ConsumeEvent) -> None:
        opened = self.spans.pop(event)
        if opened is None:
            return
        span, token = opened
        if token is not None:
            otel_context.detach(token)
        if event.error is not None:
            _end_with_error(span, event.error)
        elif isinstance(event.result, str) and event.result in _FAILED_RESULTS:
            span.set_attribute(ERROR_TYPE, str(event.result))
            span.set_status(Status(StatusCode.ERROR, f"listener answered {event.result}"))
            span.end()
        else:
            span.end()


def _creation_contexts(
    propagator: TextMapPropagator, msgs: Sequence[Message] | Sequence[MessageExt]
) -> list[SpanContext]:
    """The valid span contexts the messages carry in their properties (none: not traced)."""
    out = []
    for msg in msgs:
        span_context = trace.get_current_span(propagator.extract(msg.properties)).get_span_context()
        if span_context.is_valid:
            out.append(span_context)
    return out


def instrument_producer(
    producer: Any, tracer_provider: TracerProvider | None = None, *, propagator: TextMapPropagator | None = None
) -> SendTracing:
    """Trace every send of ``producer`` (a :class:`pymq.client.Producer` or its ``sync`` facade).

    Returns the hook (``producer.hooks.remove(hook)`` stops tracing). ``tracer_provider`` and
    ``propagator`` default to the global ones.
    """
    target = getattr(producer, "aio", producer)
    hook = SendTracing(_tracer(tracer_provider), propagator, target)
    producer.add_hook(hook)
    return hook


def instrument_consumer(
    consumer: Any, tracer_provider: TracerProvider | None = None, *, propagator: TextMapPropagator | None = None
) -> ConsumeTracing:
    """Trace a push consumer's listener calls or a pull consumer's polls (asyncio or ``sync`` facade).

    A push consumer must not be started yet (its hooks are fixed at start). Returns the hook.
    """
    target = getattr(consumer, "aio", consumer)
    model = getattr(target, "message_model", None)
    hook = ConsumeTracing(_tracer(tracer_provider), propagator, target, model)
    consumer.add_hook(hook)
    return hook
