"""Names of the topics only the broker writes, that core parts (the topic table, the send checks)
must know without importing the feature that owns each (delay levels, timers, transactions)."""

from __future__ import annotations

#: delay-level messages wait here, queue level - 1 (RocketMQ's name; see pymq.broker.delay)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

__all__ = ["SCHEDULE_TOPIC"]
