"""The put hook of priority topics: a record for queue ``q`` goes to its level queue ``q*L + level``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.broker.priority.levels import level_topic, message_level, priority_levels
from pymq.broker.put_path import Segment, move_records
from pymq.errors import MessageDecodeError
from pymq.protocol.record import parse_record, reencode
from pymq.protocol.record_batch import SplitBatch

if TYPE_CHECKING:
    from pymq.broker.store import MessageStore
    from pymq.broker.topics import TopicConfigManager


class PriorityHook:
    """Moves every record put on a priority topic's queue ``q`` to its level queue ``q*L + level``."""

    def __init__(self, topics: TopicConfigManager) -> None:
        self.topics = topics
        self.max_message_size = 0
        #: whether any priority topic exists (refreshed when the topic table's version changes)
        self.active = False
        self._seen = -1
        #: set while the service moves records to the topic itself (they must pass)
        self.passing = False

    def install(self, store: MessageStore) -> None:
        self.max_message_size = store.max_message_size

    def refresh(self) -> bool:
        """Whether any priority topic exists (looked up again when the topic table changed)."""
        counter = self.topics.data_version["counter"]
        if counter != self._seen:
            self._seen = counter
            self.active = any(priority_levels(tc) for tc in self.topics.configs())
        return self.active

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        # refresh() only when the topic table changed: this runs on every put
        if self.topics.data_version["counter"] != self._seen:
            self.refresh()
        return self.active and not self.passing

    def rewrite(self, topic: str, queue_id: int, data: bytes) -> list[Segment]:
        levels = priority_levels(self.topics.get(topic))
        if not levels:
            return [(topic, queue_id, data)]
        target = level_topic(topic).encode()
        topic_b = topic.encode()
        real = target.decode()

        def move(pos: int, size: int) -> Segment | None:
            try:
                r = parse_record(data, pos, check_crc=True)
            except MessageDecodeError:
                return None  # the store refuses it where it stands
            if r.total_size != size or r.topic != topic_b:
                return None
            rec = reencode(r, target, bytes(r.properties))
            if len(rec) > self.max_message_size:
                return None
            return (real, queue_id * levels + message_level(r.properties, levels), rec)

        return move_records(topic, queue_id, data, move)
