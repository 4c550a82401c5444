"""The broker's topic table, persisted in ``<storeDir>/config/topics.json``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymq.broker.store.config_files import read_json, write_json_atomic
from pymq.broker.store.config_writer import ConfigWriter, Durable
from pymq.broker.system_topics import SCHEDULE_TOPIC
from pymq.errors import InvalidRequestError
from pymq.logs import get_logger
from pymq.protocol.requests import AUTO_CREATE_TOPIC
from pymq.protocol.route import PERM_INHERIT, PERM_READ_WRITE, TopicConfig

if TYPE_CHECKING:
    from pymq.config import BrokerConfig

log = get_logger("broker.topics")


_VALID_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def is_system_topic(topic: str) -> bool:
    return topic in (SCHEDULE_TOPIC, AUTO_CREATE_TOPIC)


def validate_topic_name(topic: str, max_length: int = 127) -> None:
    """Raise :class:`InvalidRequestError` unless ``topic`` is a legal name (RocketMQ's rules)."""
    if not topic:
        raise InvalidRequestError("topic name is empty")
    if len(topic) > max_length:
        raise InvalidRequestError(f"topic name longer than {max_length} characters")
    if not _VALID_TOPIC.match(topic):
        raise InvalidRequestError(f"topic name {topic!r} may only contain letters, digits, '%', '|', '_' and '-'")


class TopicConfigManager:
    def __init__(
        self,
        path: Path,
        *,
        default_queue_nums: int = 8,
        delay_levels: int = 18,
        auto_create: bool = False,
    ) -> None:
        self.path = path
        self.default_queue_nums = default_queue_nums
        self.auto_create = auto_create
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": 0}
        #: called after any change (the broker re-registers with the nameservers)
        self.on_change: Callable[[], None] | None = None
        self._delay_levels = delay_levels
        #: writes topics.json off the event loop, coalescing a flood of changes into few writes
        self.writer = ConfigWriter(path, self._snapshot)

    def configure(self, config: BrokerConfig) -> None:
        """Follow the live broker config (see :class:`~pymq.broker.runtime_config.RuntimeConfig`)."""
        self.auto_create = config.auto_create_topic
        self.default_queue_nums = config.default_topic_queue_nums

    def load(self) -> None:
        data = read_json(self.path)
        if data:
            for name, d in data.get("topicConfigTable", {}).items():
                self.topics[name] = TopicConfig.from_dict(d)
            dv = data.get("dataVersion")
            if isinstance(dv, dict):
                self.data_version = {
                    "timestamp": int(dv.get("timestamp", 0)),
                    "counter": int(dv.get("counter", 0)),
                }
        # System topics always exist.
        self.topics.setdefault(SCHEDULE_TOPIC, TopicConfig(SCHEDULE_TOPIC, self._delay_levels, self._delay_levels))
        if self.auto_create:
            self.topics.setdefault(
                AUTO_CREATE_TOPIC,
                TopicConfig(
                    AUTO_CREATE_TOPIC,
                    self.default_queue_nums,
                    self.default_queue_nums,
                    PERM_READ_WRITE | PERM_INHERIT,
                ),
            )

    def _snapshot(self) -> dict[str, Any]:
        # sorted() copies the table in one C call: safe on the writer thread while the loop changes it
        return {
            "topicConfigTable": {n: tc.to_dict() for n, tc in sorted(self.topics.items())},
            "dataVersion": self.data_version,
        }

    def persist(self) -> None:
        """Write topics.json now, on this thread."""
        write_json_atomic(self.path, self._snapshot())

    def flush(self) -> None:
        """Write what changed and is not on disk yet, waiting for it (shutdown)."""
        self.writer.flush()

    def _changed(self, on_durable: Durable | None = None) -> None:
        self.data_version = {
            "timestamp": int(time.time() * 1000),
            "counter": self.data_version["counter"] + 1,
        }
        self.writer.changed(on_durable)
        if self.on_change is not None:
            self.on_change()

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def configs(self) -> list[TopicConfig]:
        """Every topic's config (a copy of the list: the table may change while the caller iterates)."""
        return list(self.topics.values())

    def upsert(self, tc: TopicConfig, on_durable: Durable | None = None) -> TopicConfig:
        """Create or replace a topic; ``on_durable`` runs (on the writer thread) once topics.json has it."""
        if tc.readQueueNums < 1 or tc.writeQueueNums < 1 or tc.readQueueNums > 1024 or tc.writeQueueNums > 1024:
            raise InvalidRequestError("queue numbers must be between 1 and 1024")
        old = self.topics.get(tc.topicName)
        self.topics[tc.topicName] = tc
        if old != tc:
            log.info(
                "topic_updated",
                topic=tc.topicName,
                read=tc.readQueueNums,
                write=tc.writeQueueNums,
                perm=tc.perm,
            )
            self._changed(on_durable)
        elif on_durable is not None:
            self.writer.changed(on_durable)  # unchanged, but the caller waits for the file to hold it
        return tc

    def delete(self, topic: str, on_durable: Durable | None = None) -> bool:
        if self.topics.pop(topic, None) is None:
            return False
        log.info("topic_deleted", topic=topic)
        self._changed(on_durable)
        return True

    def auto_create_for_send(self, topic: str) -> TopicConfig | None:
        """The config to create when a producer sends to an unknown topic (if auto-creation is on)."""
        if not self.auto_create:
            return None
        n = self.default_queue_nums
        return self.upsert(TopicConfig(topic, n, n, PERM_READ_WRITE))

    def ensure_system_topic(self, topic: str, queue_nums: int = 1, perm: int = PERM_READ_WRITE) -> TopicConfig:
        """Create ``%RETRY%group``/``%DLQ%group`` style topics on first use."""
        tc = self.topics.get(topic)
        if tc is None:
            tc = self.upsert(TopicConfig(topic, queue_nums, queue_nums, perm))
        return tc

    def replace_all(self, table: dict[str, Any], data_version: Any = None) -> None:
        """Take a master's whole table (a slave's copy); the system topics stay."""
        topics = {n: TopicConfig.from_dict(d) for n, d in table.items()}
        topics.setdefault(SCHEDULE_TOPIC, self.topics.get(SCHEDULE_TOPIC) or TopicConfig(SCHEDULE_TOPIC, 1, 1))
        if topics == self.topics:
            return
        self.topics = topics
        if isinstance(data_version, dict):
            self.data_version = {
                "timestamp": int(data_version.get("timestamp", 0)),
                "counter": int(data_version.get("counter", 0)),
            }
        self.writer.changed()
        if self.on_change is not None:
            self.on_change()

    def table(self) -> dict[str, Any]:
        return {n: tc.to_dict() for n, tc in self.topics.items()}
