"""Offsets as Spark checkpoints them: ``{topic: {brokerName: {queueId: offset}}}`` with sorted keys.

Spark compares offsets as JSON strings, so the same offsets must always serialise the same
way: keys are strings and sorted at every level.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
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


def carry_forward(begin: Table, available: Table) -> tuple[Table, dict[QueueKey, tuple[int, int]]]:
    """The latest offsets of every queue the query knows, and the queues whose offsets went backwards.

    ``begin``: where this trigger starts (the checkpointed end of the last batch).
    ``available``: the max offsets of the queues that answered now. A queue of ``begin`` that
    is missing (its broker left the route or did not answer) keeps its offset; a queue whose
    max offset is below ``begin`` keeps ``begin``'s offset too, and is reported as
    ``{key: (begin offset, broker's max offset)}``: offsets never move backwards.
    """
    latest = dict(begin)
    went_back: dict[QueueKey, tuple[int, int]] = {}
    for key, hi in available.items():
        lo = begin.get(key)
        if lo is not None and hi < lo:
            went_back[key] = (lo, hi)
        else:
            latest[key] = hi
    return latest, went_back


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


def offsets_behind_latest(source_progress: Mapping[str, Any]) -> dict[str, float]:
    """Kafka's per-trigger lag metrics from one ``StreamingQueryProgress.sources[i]`` of a pymq source.

    PySpark's Python sources cannot publish their own ``metrics``; this computes Kafka's
    ``minOffsetsBehindLatest``/``maxOffsetsBehindLatest``/``avgOffsetsBehindLatest`` from the
    progress entry's ``endOffset`` and ``latestOffset`` (JSON text or dicts). Empty when the
    entry has no latest offset yet.
    """
    end = from_json(_as_dict(source_progress.get("endOffset")))
    latest = from_json(_as_dict(source_progress.get("latestOffset")))
    behind = [max(0, hi - end.get(key, 0)) for key, hi in latest.items()]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }


def _as_dict(value: Any) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    parsed = json.loads(value) if str(value).strip() not in ("", "null") else None
    return parsed if isinstance(parsed, dict) else None
