"""Fakes shared by the broker tests."""

from __future__ import annotations

from typing import Any

from pymq.broker.store import PutResult, PutStatus
from pymq.protocol.record import parse_record, topic_field
from pymq.protocol.record_batch import SplitBatch, split_batch


class FakeStore:
    """Records put_batches (and put) calls; answers PUT_OK per record with the segment's topic and queue."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int, bytes]]] = []
        self.rules: dict[str, Any] = {}
        self.max_message_size = 1 << 20

    def set_tags_rule(self, topic: str, rule: Any) -> None:
        self.rules[topic] = rule

    def split(self, topic: str, data: bytes) -> SplitBatch:
        return split_batch(data, topic_field(topic.encode()), 1 << 20)

    def put(self, topic: str, queue_id: int, data: bytes, split: Any = None) -> list[PutResult]:
        return self.put_batches([(topic, queue_id, data)], splits=[split])[0]

    def put_batches(
        self, batches: list[tuple[str, int, bytes]], *, atomic: bool = False, splits: Any = None
    ) -> list[list[PutResult]]:
        assert atomic == (len(batches) > 1)  # the pieces of one request stand or fall together
        self.calls.append(list(batches))
        out = []
        for topic, qid, data in batches:
            n, pos = 0, 0
            while pos < len(data):
                pos += parse_record(data, pos).total_size
                n += 1
            out.append([PutResult(PutStatus.PUT_OK, 0, 0, 0, 0, topic, qid)] * n)
        return out
