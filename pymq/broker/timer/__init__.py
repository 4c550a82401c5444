"""Timer messages (any delay up to a maximum) and merged delay messages, RocketMQ 5 style.

* :mod:`.hook` — the put hook moving timer records to ``rmq_sys_wheel_timer``;
* :mod:`.timer_log`, :mod:`.timer_wheel`, :mod:`.timer_store` — the on-disk TimerLog (one
  40-byte unit per pending timer) and TimerWheel (one 32-byte slot per precision step), pure
  file formats without sockets or asyncio;
* :mod:`.checkpoint` — progress and the merged-delay index;
* :mod:`.service` — files new timer messages and delivers due ones through the put path
  (a master-only service); :mod:`.takeover` — a promoted slave carries on its old master's timers;
* :mod:`.handlers` — GET_TIMER_METRICS and GET_TIMER_CHECK_POINT.
"""

__all__: list[str] = []
