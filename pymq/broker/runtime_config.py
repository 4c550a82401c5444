"""The broker's live configuration and the one way it changes at runtime (UPDATE_BROKER_CONFIG).

Handlers and the store read the shared :class:`~pymq.config.BrokerConfig` object directly,
so a change is seen at their next read. Managers that keep a setting in a field of their
own subscribe with a ``configure(config)`` method: it runs once when subscribing and again
after every change, so the mapping from config to manager lives in the manager, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pymq.config import BrokerConfig
from pymq.errors import InvalidRequestError
from pymq.logs import get_logger

log = get_logger("broker")

#: Settings ``UPDATE_BROKER_CONFIG`` may change while the broker runs (store.* included).
RUNTIME_SETTINGS = {
    "auto_create_topic",
    "auto_create_subscription_group",
    "default_topic_queue_nums",
    "long_polling_max_seconds",
    "client_channel_expiry_seconds",
    "queue_lock_expiry_seconds",
    "slave_read_enable",
    "access_message_in_memory_max_ratio",
    "slave_read_lag_bytes",
    "store.disk_max_used_ratio",
    "store.disk_clean_forcibly_ratio",
    "store.clean_file_forcibly_enable",
    "store.disk_full_ratio",
    "store.file_reserved_hours",
    "store.delete_when",
    "store.simulated_disk_capacity",
    # transactional messages: the check service reads them every round
    "transaction_timeout_seconds",
    "transaction_check_max",
    "transaction_check_interval_seconds",
}


class RuntimeConfig:
    """Owns the live config object; validates and applies changes, then tells the subscribers."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._subscribers: list[Callable[[BrokerConfig], None]] = []

    def subscribe(self, configure: Callable[[BrokerConfig], None]) -> None:
        """Call ``configure(config)`` now and after every change."""
        self._subscribers.append(configure)
        configure(self.config)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` (dotted keys for nested settings); returns what was set, validated."""
        unknown = set(changes) - RUNTIME_SETTINGS
        if unknown:
            raise InvalidRequestError(
                f"not changeable at runtime: {', '.join(sorted(unknown))}; "
                f"allowed: {', '.join(sorted(RUNTIME_SETTINGS))}"
            )
        data = self.config.model_dump()
        for key, value in changes.items():
            target = data
            *path, last = key.split(".")
            for p in path:
                target = target[p]
            target[last] = value
        try:
            new = BrokerConfig.model_validate(data)
        except Exception as exc:
            raise InvalidRequestError(f"invalid broker config: {exc}") from exc
        applied = {}
        for key in changes:
            # In place: everyone holding the config object (or its store section) sees the change.
            *path, last = key.split(".")
            src: Any = new
            dst: Any = self.config
            for p in path:
                src = getattr(src, p)
                dst = getattr(dst, p)
            setattr(dst, last, getattr(src, last))
            applied[key] = getattr(src, last)
        for configure in self._subscribers:
            configure(self.config)
        log.info("broker_config_updated", changes=applied)
        return applied
