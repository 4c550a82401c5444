"""Client-side hooks around sends and consumption: before/after, with timing and errors.

    class Timing:
        def before_send(self, event: SendEvent) -> None: ...
        def after_send(self, event: SendEvent) -> None:
            print(event.topic, event.elapsed, event.error or event.result.status)

    producer.add_hook(Timing())          # a SendHook
    push_consumer.add_hook(hook)         # a ConsumeHook: before_consume / after_consume
    pull_consumer.add_hook(hook)         # the same ConsumeHook, around what poll() hands over

``before_send`` runs before the message is encoded, so it may still add properties (trace
context, say); ``after_send`` sees the result or the error and the elapsed seconds. On a push
consumer the consume hooks run around each listener call, on the thread that runs the
listener (``event.kind == "process"``). A pull consumer's application processes messages
after ``poll()`` returns, out of pymq's sight: there the hooks see the hand-over
(``event.kind == "receive"``): both run just before a ``poll()`` that returns messages
returns them, ``event.started`` is when the poll began and ``event.result`` the messages
(a poll that returns nothing calls no hook). A hook that
raises is logged and ignored: it never fails a send or a consumption. Without hooks the
send and consume paths pay one truth test.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pymq.client.send_result import SendResult
from pymq.logs import get_logger
from pymq.protocol.message import Message, MessageExt

log = get_logger("client.hooks")

__all__ = ["ConsumeEvent", "ConsumeHook", "SendEvent", "SendHook"]


@dataclass(slots=True)
class SendEvent:
    """One send (``send``, ``send_batch`` or ``send_oneway``) as the hooks see it."""

    group: str
    topic: str
    #: the message(s) of the send; ``before_send`` may still change their properties
    messages: Sequence[Message]
    #: "send", "batch" or "oneway"
    kind: str
    #: ``time.perf_counter()`` when the send began
    started: float
    #: seconds the send took (set before ``after_send``)
    elapsed: float = 0.0
    result: SendResult | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class ConsumeEvent:
    """One listener call of a push consumer, or one poll() of a pull consumer, as the hooks see it."""

    group: str
    messages: list[MessageExt]
    #: ``time.perf_counter()`` when the listener call (or the poll) began
    started: float
    #: "process" (a push consumer's listener call) or "receive" (a pull consumer's poll)
    kind: str = "process"
    elapsed: float = 0.0
    #: what the listener returned (a ConsumeResult, ConsumeOrderlyResult or None); a poll's messages
    result: Any = None
    error: BaseException | None = None


class SendHook(Protocol):
    def before_send(self, event: SendEvent) -> None: ...

    def after_send(self, event: SendEvent) -> None: ...


class ConsumeHook(Protocol):
    def before_consume(self, event: ConsumeEvent) -> None: ...

    def after_consume(self, event: ConsumeEvent) -> None: ...


def _call(fn: Callable[[Any], None], event: Any) -> None:
    try:
        fn(event)
    except Exception:
        log.exception("hook_failed", hook=getattr(fn, "__qualname__", repr(fn)))


def before_send(hooks: Sequence[SendHook], group: str, messages: Sequence[Message], kind: str) -> SendEvent:
    event = SendEvent(group, messages[0].topic, messages, kind, time.perf_counter())
    for hook in hooks:
        _call(hook.before_send, event)
    return event


def after_send(
    hooks: Sequence[SendHook], event: SendEvent, result: SendResult | None, error: BaseException | None
) -> None:
    event.elapsed = time.perf_counter() - event.started
    event.result = result
    event.error = error
    for hook in reversed(hooks):
        _call(hook.after_send, event)


def before_consume(hooks: Sequence[ConsumeHook], event: ConsumeEvent) -> ConsumeEvent:
    for hook in hooks:
        _call(hook.before_consume, event)
    return event


def after_consume(hooks: Sequence[ConsumeHook], event: ConsumeEvent, result: Any, error: BaseException | None) -> None:
    event.elapsed = time.perf_counter() - event.started
    event.result = result
    event.error = error
    for hook in reversed(hooks):
        _call(hook.after_consume, event)


def hooked_listener(
    listener: Callable[[list[MessageExt]], Any], hooks: Sequence[ConsumeHook], group: str, *, is_async: bool
) -> Callable[[list[MessageExt]], Any]:
    """``listener`` with the consume hooks around each call (a coroutine function stays one)."""

    def begin(msgs: list[MessageExt]) -> ConsumeEvent:
        return before_consume(hooks, ConsumeEvent(group, msgs, time.perf_counter()))

    def end(event: ConsumeEvent, result: Any, error: BaseException | None) -> None:
        after_consume(hooks, event, result, error)

    if is_async:
        run_async: Callable[[list[MessageExt]], Awaitable[Any]] = listener

        async def hooked_async(msgs: list[MessageExt]) -> Any:
            event = begin(msgs)
            try:
                result = await run_async(msgs)
            except BaseException as exc:
                end(event, None, exc)
                raise
            end(event, result, None)
            return result

        return hooked_async

    def hooked(msgs: list[MessageExt]) -> Any:
        event = begin(msgs)
        try:
            result = listener(msgs)
        except BaseException as exc:
            end(event, None, exc)
            raise
        end(event, result, None)
        return result

    return hooked
