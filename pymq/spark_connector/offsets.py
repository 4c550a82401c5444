"""Offsets as Spark checkpoints them: ``{topic: {brokerName: {queueId: offset}}}`` with sorted keys.

Spark compares offsets as JSON strings, so the same offsets must always serialise the same
way: keys are strings and sorted at every level.
"""

from __future__ import annotations

import math
from typing import Any

QueueKey = tuple[str, str, int]
Table = dict[QueueKey, int]


def to_json(table: Table) -> dict[str, Any]:
    out: dict[str, dict[str, dict[str, int]]] = {}
    for (topic, broker, qid), off in table.items():
        out.setdefault(topic, {}).setdefault(broker, {})[str(qid)] = int(off)
    return {t: {b: dict(sorted(q.items(), key=lambda kv: int(kv[0]))) for b, q in sorted(bs.items())}
            for t, bs in sorted(out.items())}  # fmt: skip


def from_json(data: dict[str, Any] | None) -> Table:
    table: Table = {}
    for topic, brokers in (data or {}).items():
        for broker, queues in brokers.items():
            for qid, off in queues.items():
                table[(topic, broker, int(qid))] = int(off)
    return table


def rate_limit(start: Table, latest: Table, max_rows: int) -> Table:
    """Kafka's split of ``max_rows`` over queues in proportion to their backlog.

    Shares under one row round up (no queue starves), larger ones round down; no queue goes
    past its latest offset.
    """
    sizes = {k: latest[k] - start.get(k, 0) for k in latest if latest[k] > start.get(k, 0)}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(latest)
    out = dict(start)
    for k in latest:
        out.setdefault(k, start.get(k, latest[k]))
    for k, size in sizes.items():
        share = max_rows * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[k] = min(start.get(k, 0) + step, latest[k])
    return out


def backlog(start: Table, end: Table) -> int:
    return sum(max(0, end[k] - start.get(k, 0)) for k in end)
