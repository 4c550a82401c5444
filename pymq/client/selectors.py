"""Producer queue selection, pure and pluggable.

* :func:`write_queues` turns a route into the topic's writable queues, in RocketMQ's order.
* A :class:`QueueSelectionStrategy` picks the queue for each (re)send:
  :class:`RoundRobinSelector` (RocketMQ's default) or :class:`LatencyAwareSelector`
  (``sendLatencyFaultEnable``), which avoids brokers that were recently slow or failing.
* A :class:`MessageQueueSelector` picks the queue for an ordered send from a user argument.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pymq.client.routes import write_queues
from pymq.errors import NoRouteError
from pymq.protocol.route import MessageQueue

__all__ = [
    "DEFAULT_LATENCY_MAX_MS",
    "DEFAULT_NOT_AVAILABLE_MS",
    "FaultItem",
    "LatencyAwareSelector",
    "LatencyFaultTable",
    "MessageQueueSelector",
    "QueueSelectionStrategy",
    "RoundRobinSelector",
    "SelectByHash",
    "SelectByModulo",
    "SelectByRandom",
    "write_queues",
]

# RocketMQ 5.1.4+ tables: a send that took >= LATENCY_MAX[i] ms avoids the broker for
# NOT_AVAILABLE[i] ms.
DEFAULT_LATENCY_MAX_MS: tuple[float, ...] = (50, 100, 550, 1800, 3000, 5000, 15000)
DEFAULT_NOT_AVAILABLE_MS: tuple[float, ...] = (0, 0, 2000, 5000, 6000, 10000, 30000)


def _require_queues(queues: Sequence[MessageQueue]) -> None:
    if not queues:
        raise NoRouteError("no writable queue to send to")


class _Counters:
    """One send counter per topic, each starting at a random value.

    Per topic (as RocketMQ keeps one per TopicPublishInfo) because a single counter shared
    by topics sent to in alternation would pin each topic to a subset of its queues.
    """

    def __init__(self, start: int | None = None) -> None:
        self._start = start
        self._values: dict[str, int] = {}

    def next(self, topic: str) -> int:
        value = self._values.get(topic)
        if value is None:
            value = self._start if self._start is not None else random.randrange(2**31)
        value += 1
        self._values[topic] = value
        return value


def _round_robin(counters: _Counters, queues: Sequence[MessageQueue]) -> MessageQueue:
    return queues[abs(counters.next(queues[0].topic)) % len(queues)]


@runtime_checkable
class QueueSelectionStrategy(Protocol):
    """Chooses the queue for each send of a message; told how each send went."""

    def select(self, queues: Sequence[MessageQueue], last_broker: str | None) -> MessageQueue:
        """Pick a queue; ``last_broker`` is the broker of the previous attempt on a retry."""
        ...

    def update(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Record how a send to ``broker_name`` went (``isolation``: it failed outright)."""
        ...


class RoundRobinSelector:
    """RocketMQ's default: ``pos = abs(++i) % n``; a retry avoids the previous broker."""

    def __init__(self, start: int | None = None) -> None:
        self._counters = _Counters(start)

    def select(self, queues: Sequence[MessageQueue], last_broker: str | None = None) -> MessageQueue:
        """Next queue in turn, skipping ``last_broker``'s queues if another broker has any."""
        if not queues:
            raise NoRouteError("no writable queue to send to")
        if last_broker is not None:
            others = [q for q in queues if q.brokerName != last_broker]
            if others:
                queues = others
        # _round_robin and _Counters.next inline: this runs once per send
        counters = self._counters
        topic = queues[0].topic
        value = counters._values.get(topic)
        if value is None:
            value = counters._start if counters._start is not None else random.randrange(2**31)
        value += 1
        counters._values[topic] = value
        return queues[abs(value) % len(queues)]

    def update(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Ignored: plain round robin does not track brokers."""


@dataclass(slots=True)
class FaultItem:
    """The latest send latency to one broker and when it may be used again."""

    broker_name: str
    latency_ms: float
    available_at: float


class LatencyFaultTable:
    """Per-broker latency and "avoid until" times (RocketMQ's ``LatencyFaultToleranceImpl``).

    Times come from ``clock`` (seconds); durations are given in milliseconds.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._items: dict[str, FaultItem] = {}
        self._worst_index = 0

    def update(self, broker_name: str, latency_ms: float, not_available_ms: float) -> None:
        """Record a send's latency; the broker is avoided for ``not_available_ms`` from now."""
        self._items[broker_name] = FaultItem(broker_name, latency_ms, self._clock() + not_available_ms / 1000.0)

    def is_available(self, broker_name: str) -> bool:
        """True unless the broker is within its not-available window; unknown brokers are available."""
        item = self._items.get(broker_name)
        return item is None or self._clock() >= item.available_at

    def get(self, broker_name: str) -> FaultItem | None:
        return self._items.get(broker_name)

    def remove(self, broker_name: str) -> None:
        self._items.pop(broker_name, None)

    def pick_one_at_least(self, broker_names: Sequence[str]) -> str | None:
        """The least bad of ``broker_names``: one of the better half when sorted by
        (available_at, latency), taken in turn so that load spreads over that half."""
        if not broker_names:
            return None
        now = self._clock()
        # Unknown brokers count as available now with no latency: the best there is.
        ranked = sorted(
            dict.fromkeys(broker_names),
            key=lambda b: (it.available_at, it.latency_ms, b) if (it := self._items.get(b)) else (now, 0.0, b),
        )
        half = len(ranked) // 2
        if half <= 0:
            return ranked[0]
        self._worst_index += 1
        return ranked[self._worst_index % half]

    def __len__(self) -> int:
        return len(self._items)


class LatencyAwareSelector:
    """Round robin over brokers that are not being avoided (``sendLatencyFaultEnable``).

    Each :meth:`update` maps the send's latency through ``latency_max``/``not_available_ms``
    to a time the broker is avoided; a failed send (``isolation``) counts as
    ``isolation_latency_ms`` and so gets the longest duration.
    """

    def __init__(
        self,
        latency_max: Sequence[float] = DEFAULT_LATENCY_MAX_MS,
        not_available_ms: Sequence[float] = DEFAULT_NOT_AVAILABLE_MS,
        clock: Callable[[], float] = time.monotonic,
        *,
        isolation_latency_ms: float = 30000,
        start: int | None = None,
        fault_table: LatencyFaultTable | None = None,
    ) -> None:
        if len(latency_max) != len(not_available_ms):
            raise ValueError("latency_max and not_available_ms must have the same length")
        if list(latency_max) != sorted(latency_max):
            raise ValueError("latency_max must be ascending")
        self.latency_max = tuple(latency_max)
        self.not_available_ms = tuple(not_available_ms)
        self.isolation_latency_ms = isolation_latency_ms
        self.fault_table = fault_table if fault_table is not None else LatencyFaultTable(clock)
        self._counters = _Counters(start)

    def not_available_duration(self, latency_ms: float) -> float:
        """How long (ms) a broker is avoided after a send that took ``latency_ms``."""
        for threshold, duration in zip(reversed(self.latency_max), reversed(self.not_available_ms), strict=True):
            if latency_ms >= threshold:
                return duration
        return 0

    def update(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Record a send's outcome for ``broker_name``."""
        latency = self.isolation_latency_ms if isolation else latency_ms
        self.fault_table.update(broker_name, latency, self.not_available_duration(latency))

    def select(self, queues: Sequence[MessageQueue], last_broker: str | None = None) -> MessageQueue:
        """A queue on an available broker (other than ``last_broker`` if possible); if every
        broker is being avoided, a queue of one from the better half."""
        _require_queues(queues)
        available = [q for q in queues if self.fault_table.is_available(q.brokerName)]
        preferred = [q for q in available if q.brokerName != last_broker]
        if preferred:
            return _round_robin(self._counters, preferred)
        if available:
            return _round_robin(self._counters, available)
        brokers = list(dict.fromkeys(q.brokerName for q in queues))
        others = [b for b in brokers if b != last_broker] or brokers
        broker = self.fault_table.pick_one_at_least(others)
        on_broker = [q for q in queues if q.brokerName == broker]
        if on_broker:
            return _round_robin(self._counters, on_broker)
        return _round_robin(self._counters, queues)


# --- ordered sends -----------------------------------------------------------------------------------


@runtime_checkable
class MessageQueueSelector(Protocol):
    """Chooses the queue for an ordered send from a user-supplied argument (e.g. an order id)."""

    def __call__(self, queues: Sequence[MessageQueue], message: Any, arg: Any) -> MessageQueue: ...


class SelectByHash:
    """``queues[h % n]``: ``h = abs(arg)`` for ints, else CRC32 of ``str(arg)`` in UTF-8.

    CRC32 rather than ``hash()``, which is salted per process: the same key must map to the
    same queue from every producer process, or per-key order is lost.
    """

    def __call__(self, queues: Sequence[MessageQueue], message: Any, arg: Any) -> MessageQueue:
        _require_queues(queues)
        is_int = isinstance(arg, int) and not isinstance(arg, bool)
        h = abs(arg) if is_int else zlib.crc32(str(arg).encode("utf-8"))
        return queues[h % len(queues)]


class SelectByModulo:
    """``queues[abs(arg) % n]``; ``arg`` must be an int."""

    def __call__(self, queues: Sequence[MessageQueue], message: Any, arg: Any) -> MessageQueue:
        _require_queues(queues)
        if not isinstance(arg, int) or isinstance(arg, bool):
            raise TypeError(f"SelectByModulo needs an int arg, got {type(arg).__name__}")
        return queues[abs(arg) % len(queues)]


class SelectByRandom:
    """A uniformly random queue (no ordering guarantee; for spreading load)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def __call__(self, queues: Sequence[MessageQueue], message: Any, arg: Any) -> MessageQueue:
        _require_queues(queues)
        return self._rng.choice(list(queues))
