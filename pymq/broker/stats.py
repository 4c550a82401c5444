"""Broker counters: messages and bytes in and out per topic, and rates sampled every second."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from operator import attrgetter
from typing import TYPE_CHECKING

from pymq.broker.store.results import PutStatus, StoredRun

if TYPE_CHECKING:
    from pymq.broker.store.results import PutResults


_STATUS = attrgetter("status")
_SIZE = attrgetter("size")


class BrokerStats:
    def __init__(self) -> None:
        self.put_msgs: dict[str, int] = defaultdict(int)
        self.put_bytes: dict[str, int] = defaultdict(int)
        self.get_msgs: dict[str, int] = defaultdict(int)
        self.get_bytes: dict[str, int] = defaultdict(int)
        self.put_total = 0
        self.get_total = 0
        self.put_failed = 0
        # (monotonic time, put_total, get_total) samples for rates
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=61)

    def record_put(self, topic: str, results: PutResults) -> None:
        if type(results) is StoredRun:  # a batch stored whole: its columns, no object per record
            self.put_msgs[topic] += len(results)
            self.put_bytes[topic] += sum(results.sizes)
            self.put_total += len(results)
            return
        statuses = list(map(_STATUS, results))
        ok = statuses.count(PutStatus.PUT_OK)  # (identity first: faster than counting 0)
        # all stored (a batch's usual case): no Python loop over the results
        all_ok = ok == len(statuses)
        size = sum(map(_SIZE, results)) if all_ok else sum(r.size for r in results if r.status == 0)
        self.put_msgs[topic] += ok
        self.put_bytes[topic] += size
        self.put_total += ok
        self.put_failed += len(results) - ok

    def record_put_one(self, topic: str, size: int) -> None:
        """:meth:`record_put` for one stored message (the single send's fast path, see ``Appender.put_single``)."""
        self.put_msgs[topic] += 1
        self.put_bytes[topic] += size
        self.put_total += 1

    def record_get(self, topic: str, count: int, size: int) -> None:
        self.get_msgs[topic] += count
        self.get_bytes[topic] += size
        self.get_total += count

    def topic_totals(self) -> dict[str, list[int]]:
        """``topic -> [messages in, messages out]`` since the broker started (GET_TOPIC_TRAFFIC)."""
        return {t: [self.put_msgs.get(t, 0), self.get_msgs.get(t, 0)] for t in sorted({*self.put_msgs, *self.get_msgs})}

    def sample(self) -> None:
        self._samples.append((time.monotonic(), self.put_total, self.get_total))

    def rates(self, window: float = 10.0) -> tuple[float, float]:
        """(put msgs/s, get msgs/s) over about the last ``window`` seconds."""
        if len(self._samples) < 2:
            return 0.0, 0.0
        last = self._samples[-1]
        first = next((s for s in self._samples if last[0] - s[0] <= window), self._samples[0])
        dt = last[0] - first[0]
        if dt <= 0:
            return 0.0, 0.0
        return (last[1] - first[1]) / dt, (last[2] - first[2]) / dt
