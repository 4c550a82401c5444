"""The nameserver's route tables (RocketMQ's RouteInfoManager), as pure logic with an injected clock.

Tables:

* ``topic_queues``   topic -> brokerName -> QueueData
* ``brokers``        brokerName -> BrokerData {cluster, brokerName, brokerAddrs {id -> addr}}
* ``clusters``       cluster -> {brokerName}
* ``live``           broker addr -> BrokerLiveInfo (last heartbeat, data version, HA address)

Queue data is taken only from masters (brokerId 0), on first registration or when the
broker's data version changes. When an address goes (expiry or closed channel) it leaves
its BrokerData; only when the last address of a brokerName goes are that group's queues
removed from every topic — a dead master with a live slave keeps its queue data so that
consumers can still read from the slave.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymq.protocol.route import MASTER_ID, BrokerData, QueueData, TopicConfig, TopicRouteData


@dataclass(slots=True)
class BrokerLiveInfo:
    cluster: str
    broker_name: str
    broker_id: int
    last_update: float
    data_version: Any = None
    ha_server_addr: str = ""


@dataclass(slots=True)
class RegisterResult:
    master_addr: str | None = None
    ha_server_addr: str | None = None


@dataclass
class RouteRegistry:
    expiry_seconds: float = 120.0
    clock: Callable[[], float] = time.monotonic
    topic_queues: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    brokers: dict[str, BrokerData] = field(default_factory=dict)
    clusters: dict[str, set[str]] = field(default_factory=dict)
    live: dict[str, BrokerLiveInfo] = field(default_factory=dict)

    def register_broker(
        self,
        cluster: str,
        addr: str,
        broker_name: str,
        broker_id: int,
        *,
        ha_server_addr: str = "",
        topic_configs: dict[str, TopicConfig] | None = None,
        data_version: Any = None,
    ) -> RegisterResult:
        """Record a broker's registration or heartbeat; returns its master's address for slaves."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        bd = self.brokers.get(broker_name)
        first = bd is None
        if bd is None:
            bd = self.brokers[broker_name] = BrokerData(cluster, broker_name, {})
        # The same address under another id means the broker changed role: drop the stale entry.
        for bid, a in list(bd.brokerAddrs.items()):
            if a == addr and bid != broker_id:
                del bd.brokerAddrs[bid]
        old = bd.brokerAddrs.get(broker_id)
        bd.brokerAddrs[broker_id] = addr
        first = first or old is None

        prev = self.live.get(addr)
        changed = prev is None or prev.data_version != data_version
        if topic_configs is not None and broker_id == MASTER_ID and (changed or first):
            self._apply_topic_configs(broker_name, topic_configs)
        self.live[addr] = BrokerLiveInfo(cluster, broker_name, broker_id, self.clock(), data_version, ha_server_addr)

        result = RegisterResult()
        if broker_id != MASTER_ID:
            master = bd.brokerAddrs.get(MASTER_ID)
            if master is not None:
                result.master_addr = master
                info = self.live.get(master)
                result.ha_server_addr = info.ha_server_addr if info else None
        return result

    def _apply_topic_configs(self, broker_name: str, configs: dict[str, TopicConfig]) -> None:
        for name, tc in configs.items():
            self.topic_queues.setdefault(name, {})[broker_name] = QueueData(
                broker_name, tc.readQueueNums, tc.writeQueueNums, tc.perm, tc.topicSysFlag
            )
        # Topics this master no longer holds (deleted on the broker) lose its queue data.
        for name in list(self.topic_queues):
            if name not in configs:
                self._remove_queue_data(name, broker_name)

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queues.get(topic)
        if queues is None:
            return
        queues.pop(broker_name, None)
        if not queues:
            del self.topic_queues[topic]

    def unregister_broker(self, cluster: str, addr: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(addr, None)
        bd = self.brokers.get(broker_name)
        if bd is not None and bd.brokerAddrs.get(broker_id) == addr:
            del bd.brokerAddrs[broker_id]
            if not bd.brokerAddrs:
                self._remove_broker_name(broker_name)

    def _remove_broker_name(self, broker_name: str) -> None:
        bd = self.brokers.pop(broker_name, None)
        if bd is not None:
            names = self.clusters.get(bd.cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.clusters[bd.cluster]
        for topic in list(self.topic_queues):
            self._remove_queue_data(topic, broker_name)

    def remove_addr(self, addr: str) -> bool:
        """Forget an address (expired, or its channel closed). True if it was known."""
        known = self.live.pop(addr, None) is not None
        for name, bd in list(self.brokers.items()):
            for bid, a in list(bd.brokerAddrs.items()):
                if a == addr:
                    known = True
                    del bd.brokerAddrs[bid]
            if not bd.brokerAddrs:
                self._remove_broker_name(name)
        return known

    def scan_expired(self) -> list[str]:
        """Drop brokers silent for longer than the expiry; returns the removed addresses."""
        deadline = self.clock() - self.expiry_seconds
        expired = [addr for addr, info in self.live.items() if info.last_update < deadline]
        for addr in expired:
            self.remove_addr(addr)
        return expired

    def route(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queues.get(topic)
        if not queues:
            return None
        route = TopicRouteData()
        for broker_name in sorted(queues):
            route.queueDatas.append(queues[broker_name])
            bd = self.brokers.get(broker_name)
            if bd is not None:
                route.brokerDatas.append(BrokerData(bd.cluster, bd.brokerName, dict(bd.brokerAddrs)))
        if not route.brokerDatas:
            return None
        return route

    def delete_topic(self, topic: str) -> bool:
        return self.topic_queues.pop(topic, None) is not None

    def topics(self) -> list[str]:
        return sorted(self.topic_queues)

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {n: bd.to_dict() for n, bd in sorted(self.brokers.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.clusters.items())},
        }
