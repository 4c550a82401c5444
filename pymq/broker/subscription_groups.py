"""Per-group consumption settings (RocketMQ's subscription group config).

Persisted in ``<storeDir>/config/subscriptionGroup.json``. ``retryMaxTimes`` caps the
reconsume count before a message goes to the group's dead-letter queue.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymq.broker.store.config_files import read_json, write_json_atomic
from pymq.broker.store.config_writer import ConfigWriter, Durable
from pymq.errors import InvalidRequestError

if TYPE_CHECKING:
    from pymq.config import BrokerConfig

#: RocketMQ's default retry limit (a group's ``retryMaxTimes``; see pymq.broker.retry.policy)
DEFAULT_MAX_RECONSUME_TIMES = 16


@dataclass
class SubscriptionGroupConfig:
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = DEFAULT_MAX_RECONSUME_TIMES
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        known = {f.name: f.type for f in fields(cls)}
        unknown = set(d) - set(known)
        if unknown:
            raise InvalidRequestError(f"unknown subscription group settings: {', '.join(sorted(unknown))}")
        if "groupName" not in d:
            raise InvalidRequestError("subscription group config needs groupName")
        cfg = cls(groupName=str(d["groupName"]))
        for k, v in d.items():
            cur = getattr(cfg, k)
            try:
                if isinstance(cur, bool):
                    v = v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")
                elif isinstance(cur, int):
                    v = int(v)
            except (TypeError, ValueError) as exc:
                raise InvalidRequestError(f"bad value for {k}: {v!r}") from exc
            setattr(cfg, k, v)
        if cfg.retryMaxTimes < 0 or cfg.retryQueueNums < 1:
            raise InvalidRequestError("retryMaxTimes must be >= 0 and retryQueueNums >= 1")
        return cfg


class SubscriptionGroupManager:
    def __init__(self, path: Path, *, auto_create: bool = True) -> None:
        self.path = path
        self.auto_create = auto_create
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        #: writes the file off the event loop, coalescing changes (auto-created groups come in floods)
        self.writer = ConfigWriter(path, lambda: {"subscriptionGroupTable": self.table()})

    def configure(self, config: BrokerConfig) -> None:
        """Follow the live broker config (see :class:`~pymq.broker.runtime_config.RuntimeConfig`)."""
        self.auto_create = config.auto_create_subscription_group

    def load(self) -> None:
        data = read_json(self.path)
        if data:
            for name, d in data.get("subscriptionGroupTable", {}).items():
                self.groups[name] = SubscriptionGroupConfig.from_dict(d)

    def persist(self) -> None:
        """Write the file now, on this thread."""
        write_json_atomic(self.path, {"subscriptionGroupTable": self.table()})

    def flush(self) -> None:
        """Write what changed and is not on disk yet, waiting for it (shutdown)."""
        self.writer.flush()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        cfg = self.groups.get(group)
        if cfg is None and self.auto_create:
            cfg = self.groups[group] = SubscriptionGroupConfig(group)
            self.writer.changed()
        return cfg

    def table(self) -> dict[str, dict[str, Any]]:
        """Every group's config as a dict, by name (the file's and GET_ALL_SUBSCRIPTIONGROUP_CONFIG's form)."""
        return {n: g.to_dict() for n, g in sorted(self.groups.items())}

    def upsert(self, cfg: SubscriptionGroupConfig, on_durable: Durable | None = None) -> None:
        """Create or replace a group's config; ``on_durable`` runs once the file has it."""
        self.groups[cfg.groupName] = cfg
        self.writer.changed(on_durable)

    def replace_all(self, table: dict[str, Any]) -> None:
        """Take a master's whole table (a slave's copy)."""
        groups = {n: SubscriptionGroupConfig.from_dict(d) for n, d in table.items()}
        if groups != self.groups:
            self.groups = groups
            self.writer.changed()

    def delete(self, group: str, on_durable: Durable | None = None) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self.writer.changed(on_durable)
        return True
