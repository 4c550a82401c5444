"""Runtime config changes reach every manager through one mechanism (RuntimeConfig), not a hand-copied list."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.broker.consumers import ConsumerManager
from pymq.broker.locks import QueueLockManager
from pymq.broker.runtime_config import RUNTIME_SETTINGS, RuntimeConfig
from pymq.broker.subscription_groups import SubscriptionGroupManager
from pymq.broker.topics import TopicConfigManager
from pymq.config import BrokerConfig
from pymq.errors import InvalidRequestError


def test_managers_follow_the_live_config(tmp_path: Path) -> None:
    config = BrokerConfig(store={"store_dir": str(tmp_path)})
    runtime = RuntimeConfig(config)
    topics = TopicConfigManager(tmp_path / "topics.json")
    groups = SubscriptionGroupManager(tmp_path / "sg.json")
    consumers = ConsumerManager()
    locks = QueueLockManager()
    for m in (topics, groups, consumers, locks):
        runtime.subscribe(m.configure)
    # Subscribing applies the current config at once.
    assert topics.auto_create == config.auto_create_topic
    assert topics.default_queue_nums == config.default_topic_queue_nums
    assert groups.auto_create == config.auto_create_subscription_group
    assert consumers.expiry_seconds == config.client_channel_expiry_seconds
    assert locks.expiry_seconds == config.queue_lock_expiry_seconds

    applied = runtime.update(
        {
            "auto_create_topic": not config.auto_create_topic,
            "auto_create_subscription_group": False,
            "default_topic_queue_nums": 3,
            "client_channel_expiry_seconds": 7.5,
            "queue_lock_expiry_seconds": 9.0,
            "store.disk_max_used_ratio": 0.5,
        }
    )
    assert applied["default_topic_queue_nums"] == 3 and applied["store.disk_max_used_ratio"] == 0.5
    assert topics.auto_create == config.auto_create_topic and topics.default_queue_nums == 3
    assert groups.auto_create is False
    assert consumers.expiry_seconds == 7.5 and locks.expiry_seconds == 9.0
    assert config.store.disk_max_used_ratio == 0.5  # in place: the store holds this object


def test_only_runtime_settings_change_and_only_to_valid_values(tmp_path: Path) -> None:
    config = BrokerConfig(store={"store_dir": str(tmp_path)})
    runtime = RuntimeConfig(config)
    with pytest.raises(InvalidRequestError, match="not changeable at runtime: port"):
        runtime.update({"port": 1})
    with pytest.raises(InvalidRequestError, match="invalid broker config"):
        runtime.update({"default_topic_queue_nums": "many"})
    assert "slave_read_enable" in RUNTIME_SETTINGS
