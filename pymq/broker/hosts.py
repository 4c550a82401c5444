"""What broker services see of the broker: the parts they use, never the app.

:class:`BrokerParts` is the one object the app hands to the services that deliver or re-put
messages (schedule, timers, priority refill); the protocols say what each needs of it (tests
hand them a namespace with the same names). ``store`` and ``put_path`` exist once the app has
started its store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.put_path import PutPath
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.topics import TopicConfigManager
    from pymq.config import BrokerConfig


class DeliveryHost(Protocol):
    """A service that reads the store and puts messages back (schedule, timers)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def store(self) -> MessageStore | None: ...
    @property
    def put_path(self) -> PutPath: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def stats(self) -> BrokerStats: ...


class OffsetsDeliveryHost(DeliveryHost, Protocol):
    """A delivering service that also keeps consumer offsets of a system group (priority refill)."""

    @property
    def offsets(self) -> ConsumerOffsetManager: ...


@dataclass
class BrokerParts:
    """The broker's shared parts, as services see them (satisfies :class:`OffsetsDeliveryHost`)."""

    config: BrokerConfig
    topics: TopicConfigManager
    stats: BrokerStats
    offsets: ConsumerOffsetManager
    #: set by the app once the store is made (None before start)
    store: MessageStore | None = None
    #: set by the app with the store: every put goes through it
    put_path: PutPath = None  # type: ignore[assignment]


__all__ = ["BrokerParts", "DeliveryHost", "OffsetsDeliveryHost"]
