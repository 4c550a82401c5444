"""Priority topics' names and levels: which topics have levels, their level topic, a message's level (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.protocol.record import find_property

if TYPE_CHECKING:
    from pymq.protocol.route import TopicConfig

PRIORITY_ATTRIBUTE = "priority.levels"
PRIORITY_PREFIX = "rmq_sys_priority_"
MAX_LEVELS = 100
_PRIORITY = b"PRIORITY\x01"
PERSIST_INTERVAL = 1.0
#: the group whose consumer offsets on the level queues are the refill offsets (copied to slaves)
PRIORITY_GROUP = "CID_RMQ_SYS_PRIORITY"


def priority_levels(tc: TopicConfig | None) -> int:
    """How many levels a topic has (0: not a priority topic)."""
    if tc is None or not tc.attributes:
        return 0
    raw = tc.attributes.get(PRIORITY_ATTRIBUTE)
    try:
        n = int(raw) if raw is not None else 0
    except ValueError:
        return 0
    return n if 2 <= n <= MAX_LEVELS else 0


def level_topic(topic: str) -> str:
    return PRIORITY_PREFIX + topic


def is_level_topic(topic: str) -> bool:
    """Whether ``topic`` is the internal level topic of a priority topic (the service's arrivals)."""
    return topic.startswith(PRIORITY_PREFIX)


def message_level(props: bytes, levels: int) -> int:
    raw = find_property(props, _PRIORITY) if props else None
    try:
        p = int(raw) if raw else 0
    except ValueError:
        p = 0
    return min(max(p, 0), levels - 1)
