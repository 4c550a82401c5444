"""Delay-level messages (RocketMQ 4's ``DELAY`` property, levels 1s … 2h).

* :mod:`.hook` — the put hook that moves a record with a delay level to ``SCHEDULE_TOPIC``
  (queue level - 1; its consume-queue entries carry the delivery time);
* :mod:`.service` — :class:`ScheduleService`, a master-only service that delivers due
  messages to their real topics and keeps its offsets in ``config/delayOffset.json``.
"""

from pymq.broker.delay.hook import SCHEDULE_TOPIC, DelayHook
from pymq.broker.delay.service import ScheduleService

__all__ = ["SCHEDULE_TOPIC", "DelayHook", "ScheduleService"]
