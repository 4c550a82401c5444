"""Requests about many queues at once (issue 36): QUERY_QUEUE_OFFSETS and WAIT_QUEUE_ARRIVAL.

A consumer of thousands of queues would otherwise make one or two round trips per queue it
takes at rebalance, and hold one long-polling pull per idle queue. The queues are the body
(msgpack ``{"queues": [[topic, queueId(, offset)], ...]}``), at most
:data:`MAX_QUEUES_PER_REQUEST`; the header names the group. Re-exported by
:mod:`pymq.protocol.requests`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymq.errors import InvalidRequestError
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.wire_header import I32_MAX, Header, bounded, wire_header

#: the most queues one request may name (a body of ~100 KiB)
MAX_QUEUES_PER_REQUEST = 4096


@wire_header
@dataclass(slots=True, kw_only=True)
class QueryQueueOffsetsRequest(Header):
    """QUERY_QUEUE_OFFSETS: per queue of the body, ``[committed, min, max, byTime]``.

    ``committed`` is the group's offset (-1: none); ``byTime`` the offset of the first message
    stored at or after ``timestamp`` (ms), -1 without one. The answer body is
    ``{"offsets": [[...], ...]}`` in the body's order.
    """

    consumer_group: str
    timestamp: int | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class WaitQueueArrivalRequest(Header):
    """WAIT_QUEUE_ARRIVAL: answer when any queue of the body has a message at or past its offset.

    Held up to ``suspend_timeout_millis`` (capped by the broker's ``long_polling_max_seconds``);
    the answer body ``{"ready": [i, ...]}`` lists the body's queues that have messages (empty:
    timed out). A queue the broker cannot serve (unknown topic, queue out of range) is ready:
    the pull that follows reports why.
    """

    consumer_group: str
    suspend_timeout_millis: int = bounded(0, lo=0, hi=I32_MAX)


def queues_body(rows: list[tuple[Any, ...]]) -> bytes:
    """The body of a many-queue request: ``(topic, queueId)`` or ``(topic, queueId, offset)`` rows."""
    return encode_body({"queues": [list(r) for r in rows]})


def read_queues(body: Any, *, with_offset: bool) -> list[tuple[str, int, int]]:
    """The ``(topic, queueId, offset)`` rows of a many-queue body (offset 0 when not carried)."""
    decoded = decode_body(body, "queue list")
    rows = decoded.get("queues") if isinstance(decoded, dict) else None
    if not isinstance(rows, list):
        raise InvalidRequestError("body needs a 'queues' list")
    if len(rows) > MAX_QUEUES_PER_REQUEST:
        raise InvalidRequestError(f"at most {MAX_QUEUES_PER_REQUEST} queues per request, got {len(rows)}")
    width = 3 if with_offset else 2
    out = []
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) != width
            or not isinstance(row[0], str)
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in row[1:])
            or not 0 <= row[1] <= I32_MAX
        ):
            raise InvalidRequestError(f"each queue is [topic, queueId{', offset' if with_offset else ''}]: {row!r}")
        out.append((row[0], row[1], row[2] if with_offset else 0))
    return out


def read_list(body: Any, key: str) -> list[Any]:
    """The ``key`` list of an answer body (``offsets`` or ``ready``)."""
    decoded = decode_body(body, f"{key} answer")
    value = decoded.get(key) if isinstance(decoded, dict) else None
    if not isinstance(value, list):
        raise InvalidRequestError(f"answer body needs a '{key}' list")
    return value
