"""What broker services see of the broker: the app passes itself, and no service imports it."""

from __future__ import annotations

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
