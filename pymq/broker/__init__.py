"""The broker: store, send/pull, consumer groups, offsets, locks, retries and delays."""

from pymq.broker.app import BrokerApp

__all__ = ["BrokerApp"]
