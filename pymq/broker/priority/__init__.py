"""Priority topics: higher-priority messages are consumed first, FIFO within a priority, no starvation.

A topic with the attribute ``priority.levels=L`` (2..100; ``pymq-admin topic-create
--attribute priority.levels=10``) takes messages with the property ``PRIORITY`` = 0..L-1
(higher is more urgent; missing or unreadable is 0, above L-1 is L-1).

Inside the RocketMQ model, behind each queue ``q`` of the topic stand L internal level
queues: :class:`PriorityHook` (last on the put path) stores a message for ``(topic, q)`` in
``rmq_sys_priority_<topic>`` queue ``q*L + level`` instead. Consumers keep reading the
topic's ordinary queues; :class:`PriorityService` *refills* queue ``q`` from its level
queues when a pull (any group) has read everything moved so far (:class:`PriorityInterceptor`
sees PULL_MESSAGE before its handler), and when a message reaches a level queue while a
consumer is waiting on ``q`` (long polling). A refill moves up to ``priority_refill_batch``
messages, chosen by one rule:

1. messages that have waited ``priority_max_wait_ms`` or longer in a level queue (aged) go
   first, oldest first, but at most ``ceil(batch * priority_aged_share)`` of them (8 of 32 by
   default): the anti-starvation rule, bounded so that a backlog older than the limit does
   not turn priority off;
2. then the highest non-empty level, in arrival order, then the next level down (aged
   messages included, where they stand).

So among the messages not yet moved, higher priority is consumed first; within one
priority, one queue is FIFO. The order is fixed when messages move: a message already
moved (or buffered by a push consumer) is not overtaken by a later, more urgent one.
Orderly consumption works on the moved order: messages of one queue with the same
priority keep their send order; messages of different priorities do not (by design).
Refill progress per level queue is persisted every second (``config/priorityOffset.json``);
after a kill -9 up to a second of moves may be repeated (at-least-once). Masters only.
The same offsets are kept as consumer offsets of :data:`PRIORITY_GROUP` on the level
queues, so a slave's consumer-offset copy carries them and a promoted slave goes on where
its old master stopped (issue 16; moves since the last copy are repeated).
"""

from pymq.broker.priority.hook import PriorityHook
from pymq.broker.priority.interceptor import PriorityInterceptor
from pymq.broker.priority.levels import (
    PRIORITY_ATTRIBUTE,
    PRIORITY_GROUP,
    PRIORITY_PREFIX,
    level_topic,
    priority_levels,
)
from pymq.broker.priority.service import PriorityService

__all__ = [
    "PRIORITY_ATTRIBUTE",
    "PRIORITY_GROUP",
    "PRIORITY_PREFIX",
    "PriorityHook",
    "PriorityInterceptor",
    "PriorityService",
    "level_topic",
    "priority_levels",
]
