"""Who hears that messages landed in a queue: the store's arrival listeners, keyed by topic.

A listener registers for every topic, or with a predicate over topic names (the broker's
services care about one internal topic each). The predicates are asked once per topic and
the answer is kept, so a put looks up one tuple by its topic and calls only the listeners
in it: a topic nobody but the "every topic" listeners wants costs no predicate call. The
store knows no topic's meaning; the predicates are the listeners' own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

#: ``listener(topic, queue_id, max_offset)``: ``max_offset`` is the queue's end after the put
ArrivalListener = Callable[[str, int, int], None]
#: which topics a listener wants; must depend on the name only (its answer is cached)
TopicFilter = Callable[[str], bool]


class QueueEnd(Protocol):
    """What :meth:`ArrivalListeners.notify_queues` reads of a queue."""

    @property
    def max_offset(self) -> int: ...


class ArrivalListeners:
    """Arrival listeners with their topic filters, and per topic the listeners to call."""

    def __init__(self) -> None:
        #: replaced, never mutated in place: a put on another thread resolves from a consistent list
        self._registered: list[tuple[ArrivalListener, TopicFilter | None]] = []
        #: topic -> its listeners in registration order (filled by :meth:`resolve` at a topic's
        #: first arrival; replaced, never mutated in place, when the registrations change)
        self.by_topic: dict[str, tuple[ArrivalListener, ...]] = {}

    @property
    def listeners(self) -> list[ArrivalListener]:
        """Every registered listener, in registration order."""
        return [listener for listener, _ in self._registered]

    def add(self, listener: ArrivalListener, topics: TopicFilter | None = None) -> None:
        self._registered = [*self._registered, (listener, topics)]
        self.by_topic = {}  # after the list: a cache taken after this sees the new list

    def remove(self, listener: ArrivalListener) -> None:
        """Drop the first registration of ``listener`` (nothing if it has none)."""
        registered = self._registered
        for i, (known, _) in enumerate(registered):
            if known == listener:
                self._registered = registered[:i] + registered[i + 1 :]
                self.by_topic = {}
                return

    def forget(self, topic: str) -> None:
        """Drop the cached answer for a deleted topic (the cache holds one entry per topic seen)."""
        self.by_topic.pop(topic, None)

    def resolve(self, topic: str) -> tuple[ArrivalListener, ...]:
        """The listeners of ``topic`` (asking the filters, then cached)."""
        cache = self.by_topic  # before the list (see add): a stale answer only lands in a dropped cache
        found = tuple(listener for listener, wants in self._registered if wants is None or wants(topic))
        cache[topic] = found
        return found

    def of_topic(self, topic: str) -> tuple[ArrivalListener, ...]:
        found = self.by_topic.get(topic)
        return found if found is not None else self.resolve(topic)

    def notify_queues(self, arrived: set[tuple[str, int]], queues: Mapping[tuple[str, int], QueueEnd]) -> None:
        """Call each arrived queue's topic listeners with its end (several batches, replicated records)."""
        of_topic = self.of_topic
        for key in arrived:
            listeners = of_topic(key[0])
            if listeners:
                cq = queues.get(key)
                end = cq.max_offset if cq is not None else 0
                if end:
                    for listener in listeners:
                        listener(key[0], key[1], end)
