"""A consumer's running info (GET_CONSUMER_RUNNING_INFO, issue 33): what the dashboard shows of one client.

The broker relays an admin's request to the client; :class:`~pymq.client.instance.ClientInstance`
answers it with :func:`running_info` of the named group's consumer, a msgpack body shaped
like RocketMQ's ConsumerRunningInfo:

* ``clientId``, ``group``, ``properties`` (consume type, message model, where it starts,
  orderly, the pull thresholds, pid, Python and pymq versions, start time; a push consumer's
  messages consumed successfully since it started and their average rate),
* ``subscriptionSet`` (as the heartbeat sends them),
* ``mqTable``: one row per owned queue: ``mq`` and ``pq`` (RocketMQ's ProcessQueueInfo
  names: cached message count and bytes, min/max cached and commit offsets, ``locked``,
  last lock/pull/consume times as epoch ms, ``droped``; the last pull is when the last pull
  *answer* came, so an idle queue's long poll shows up to its hold time, 15 s, behind),
* ``jstack`` (only when asked): the process's threads' and the loop's asyncio tasks' stacks
  as text; tasks with the same stack are printed once with their count (a consumer has one
  pull task per queue), and the text is cut at :data:`MAX_JSTACK_CHARS`.

Everything here reads in-memory state on the loop: no I/O (stack lines name file, line and
function, never the source text, which would be read from disk), nothing awaited.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from pymq.clock import Clock

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pymq.client.process_queue import ProcessQueue
    from pymq.protocol.filter import Subscription
    from pymq.protocol.route import MessageQueue


class RunningConsumer(Protocol):
    """What :func:`running_info` reads of a consumer (ConsumerBase has it; named here, not imported,
    so that consumer_base can import this module)."""

    clock: Clock
    group: str
    consume_type: str
    message_model: Any
    consume_from_where: Any
    pull_batch_size: int | None
    pull_batch_bytes: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue: int
    start_timestamp: int

    @property
    def process_queues(self) -> Mapping[MessageQueue, ProcessQueue]: ...

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...


#: the stacks' text is cut here (a process with thousands of distinct task stacks)
MAX_JSTACK_CHARS = 256 * 1024
#: frames printed per thread or task (innermost kept)
MAX_FRAMES = 40
#: task names listed for a group of tasks with the same stack
MAX_TASK_NAMES = 5


def _epoch_ms(clock: Clock, monotonic_at: float) -> int:
    """A monotonic instant of ``clock`` as epoch milliseconds (0: never)."""
    if not monotonic_at:
        return 0
    return clock.time_ms() - int((clock.monotonic() - monotonic_at) * 1000)


def process_queue_info(pq: ProcessQueue, clock: Clock) -> dict[str, Any]:
    """One owned queue's state (RocketMQ's ProcessQueueInfo field names)."""
    count = pq.count
    return {
        "commitOffset": pq.commit_offset(),
        "cachedMsgMinOffset": pq.min_offset,
        "cachedMsgMaxOffset": pq.max_offset if count else -1,
        "cachedMsgCount": count,
        "cachedMsgSizeInBytes": pq.size,
        "locked": pq.locked,
        "lastLockTimestamp": _epoch_ms(clock, pq.last_lock_time),
        "lastPullTimestamp": _epoch_ms(clock, pq.last_pull_time),
        "lastConsumeTimestamp": _epoch_ms(clock, pq.last_consume_time),
        "consuming": pq.consuming,
        "droped": pq.dropped,
    }


def _pymq_version() -> str:
    try:
        import pymq

        return str(pymq.__version__)
    except Exception:  # not installed as a distribution (a source checkout)
        return "unknown"


def running_info(consumer: RunningConsumer, client_id: str, *, jstack: bool = False) -> dict[str, Any]:
    """The body answering GET_CONSUMER_RUNNING_INFO for ``consumer`` (see the module's docstring)."""
    clock = consumer.clock
    properties: dict[str, Any] = {
        "consumeType": consumer.consume_type,
        "messageModel": consumer.message_model.value,
        "consumeFromWhere": consumer.consume_from_where.value,
        "consumeOrderly": bool(getattr(consumer, "orderly", False)),
        "pullBatchSize": consumer.pull_batch_size,
        "pullBatchBytes": consumer.pull_batch_bytes,
        "pullThresholdForQueue": consumer.pull_threshold_for_queue,
        "pullThresholdSizeForQueue": consumer.pull_threshold_size_for_queue,
        "consumerClass": type(consumer).__name__,
        "pid": os.getpid(),
        "language": "PYTHON",
        "pythonVersion": sys.version.split()[0],
        "pymqVersion": _pymq_version(),
        "startTimestamp": consumer.start_timestamp,
        "nowTimestamp": clock.time_ms(),
    }
    concurrency = getattr(consumer, "consume_concurrency", None)
    if concurrency is not None:
        properties["consumeConcurrency"] = concurrency
    service = getattr(consumer, "service", None)  # a push consumer's consume service, once started
    consumed = getattr(service, "consumed", None)
    if isinstance(consumed, int):
        # lifetime figures (RocketMQ's statusTable keeps per-minute rates: not kept here)
        properties["consumeOkTotal"] = consumed
        if consumer.start_timestamp:
            seconds = max(0.001, (properties["nowTimestamp"] - consumer.start_timestamp) / 1000)
            properties["consumeOkTpsSinceStart"] = round(consumed / seconds, 2)
    rows = [
        {"mq": mq.to_dict(), "pq": process_queue_info(pq, clock)}
        for mq, pq in sorted(consumer.process_queues.items(), key=lambda item: item[0])
    ]
    body: dict[str, Any] = {
        "clientId": client_id,
        "group": consumer.group,
        "properties": properties,
        "subscriptionSet": [s.to_dict() for s in consumer.subscriptions.values()],
        "mqTable": rows,
    }
    if jstack:
        body["jstack"] = stacks_text()
    return body


# --- stacks ----------------------------------------------------------------------------------------


def _frame_line(frame: FrameType, lineno: int | None = None) -> str:
    code = frame.f_code
    return f'  File "{code.co_filename}", line {lineno if lineno is not None else frame.f_lineno}, in {code.co_name}'


def _thread_frames(frame: FrameType | None) -> list[str]:
    """A thread's stack, outermost first, the innermost MAX_FRAMES."""
    lines: list[str] = []
    while frame is not None and len(lines) < MAX_FRAMES:
        lines.append(_frame_line(frame))
        frame = frame.f_back
    lines.reverse()
    return lines


def _task_frames(task: asyncio.Task[Any]) -> list[str]:
    """Where a task waits: its chain of awaiting coroutines, outermost first, and what the innermost awaits.

    ``Task.get_stack`` gives a suspended coroutine's own frame only; the chain is followed through
    ``cr_await`` (``gi_yieldfrom`` for generator-based awaitables) to the innermost one.
    """
    lines: list[str] = []
    obj: Any = task.get_coro()
    while obj is not None and len(lines) < MAX_FRAMES:
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None) or getattr(obj, "ag_frame", None)
        if frame is None:  # a future, or a finished or foreign awaitable: say what
            if not lines or not hasattr(obj, "cr_code"):
                what = type(obj).__name__
                lines.append("  awaiting a Future" if what == "FutureIter" else f"  awaiting {what}")
            break
        lines.append(_frame_line(frame))
        obj = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None) or getattr(obj, "ag_await", None)
    return lines


def _task_name(task: asyncio.Task[Any]) -> str:
    name = task.get_name()
    coro = task.get_coro()
    qual = getattr(coro, "__qualname__", None) or type(coro).__name__
    return f"{name} ({qual})"


def stacks_text(loop: asyncio.AbstractEventLoop | None = None, *, limit: int = MAX_JSTACK_CHARS) -> str:
    """The process's thread stacks and ``loop``'s task stacks (the running loop's by default) as text."""
    out: list[str] = []
    threads = {t.ident: t for t in threading.enumerate()}
    frames = sys._current_frames()
    out.append(f"Threads ({len(frames)}):")
    for ident, frame in sorted(frames.items(), key=lambda item: item[0] or 0):
        t = threads.get(ident)
        name = t.name if t is not None else "?"
        daemon = " daemon" if t is not None and t.daemon else ""
        out.append(f'\n"{name}" ident={ident}{daemon}')
        out.extend(_thread_frames(frame))
    try:
        tasks: Iterable[asyncio.Task[Any]] = asyncio.all_tasks(loop)
    except RuntimeError:  # no running loop
        tasks = ()
    groups: dict[tuple[str, ...], list[asyncio.Task[Any]]] = {}
    n = 0
    for task in tasks:
        n += 1
        groups.setdefault(tuple(_task_frames(task)), []).append(task)
    out.append(f"\nAsyncio tasks ({n}, {len(groups)} distinct stacks):")
    for stack, members in sorted(groups.items(), key=lambda item: -len(item[1])):
        names = ", ".join(sorted(_task_name(t) for t in members)[:MAX_TASK_NAMES])
        more = f", ... {len(members) - MAX_TASK_NAMES} more" if len(members) > MAX_TASK_NAMES else ""
        out.append(f"\n{len(members)} task(s): {names}{more}")
        out.extend(stack)
    text = "\n".join(out)
    if len(text) > limit:
        text = text[:limit] + f"\n... cut at {limit} characters"
    return text


# --- RocketMQ 4.x clients' answers ---------------------------------------------------------------


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _value(text: str, i: int, decoder: json.JSONDecoder) -> tuple[Any, int]:
    i = _skip_ws(text, i)
    if i >= len(text):
        raise ValueError("unexpected end")
    c = text[i]
    if c == "{":
        pairs: list[tuple[Any, Any]] = []
        i = _skip_ws(text, i + 1)
        if text.startswith("}", i):
            return {}, i + 1
        while True:
            key, i = _value(text, i, decoder)
            i = _skip_ws(text, i)
            if not text.startswith(":", i):
                raise ValueError(f"':' expected at {i}")
            val, i = _value(text, i + 1, decoder)
            pairs.append((key, val))
            i = _skip_ws(text, i)
            if text.startswith(",", i):
                i += 1
                continue
            if text.startswith("}", i):
                i += 1
                break
            raise ValueError(f"',' or '}}' expected at {i}")
        if all(isinstance(k, str) for k, _ in pairs):
            return dict(pairs), i
        return [list(p) for p in pairs], i  # a map keyed by objects: its entries
    if c == "[":
        items: list[Any] = []
        i = _skip_ws(text, i + 1)
        if text.startswith("]", i):
            return items, i + 1
        while True:
            item, i = _value(text, i, decoder)
            items.append(item)
            i = _skip_ws(text, i)
            if text.startswith(",", i):
                i += 1
                continue
            if text.startswith("]", i):
                return items, i + 1
            raise ValueError(f"',' or ']' expected at {i}")
    return decoder.raw_decode(text, i)


#: epoch ms past 2100-01-01: not a time (the C++ client 2.x sends uninitialised lock/consume times)
_LATEST_PLAUSIBLE_MS = 4_102_444_800_000


def _number(key: str, value: Any) -> Any:
    """fastjson and the C++ client write longs as strings: back to ints where they are (unsigned -1, the
    C++ client's "no offset", back to -1; a time that cannot be one to 0, "never")."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
        if value >= 1 << 63:
            value -= 1 << 64
    if key.endswith("Timestamp") and isinstance(value, int) and not 0 <= value <= _LATEST_PLAUSIBLE_MS:
        return 0
    return value


def parse_remoting_running_info(text: str) -> dict[str, Any]:
    """A RocketMQ 4.x client's ConsumerRunningInfo (its JSON, whose ``mqTable`` is keyed by MessageQueue
    objects, which JSON does not allow) in pymq's shape: ``mqTable`` as ``{"mq", "pq"}`` rows, long
    values as ints. Raises ValueError when the text is not that."""
    value, end = _value(text, 0, json.JSONDecoder())
    if _skip_ws(text, end) != len(text) or not isinstance(value, dict):
        raise ValueError("not a ConsumerRunningInfo object")
    table = value.get("mqTable")
    if isinstance(table, dict):  # an empty table, or a client that wrote string keys
        table = [[k, v] for k, v in table.items()]
    if isinstance(table, list):
        value["mqTable"] = [
            {"mq": dict(mq), "pq": {str(k): _number(str(k), v) for k, v in pq.items()}}
            for mq, pq in table
            if isinstance(mq, dict) and isinstance(pq, dict)
        ]
    return value
