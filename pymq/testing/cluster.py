"""An in-process cluster for tests and experiments: nameservers and brokers on ephemeral ports.

    async with LocalCluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("orders", queues=4)
        ... Producer(namesrv=cluster.namesrv_addr) ...

Everything listens on 127.0.0.1; each broker's store lives under ``base_dir/<brokerName>``.
Store files are small by default so tests do not allocate gigabytes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pymq.broker.app import BrokerApp
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.config import SMALL_STORE_SIZES, BrokerConfig, NamesrvConfig, StoreConfig
from pymq.nameserver.app import NamesrvApp
from pymq.protocol.route import PERM_READ_WRITE, TopicConfig

#: Store files for tests: 8 MiB commitlog, 400 KB consume-queue and 2 MB index files, so that
#: a suite starting dozens of brokers stays small on disk.
SMALL_STORE = {
    **SMALL_STORE_SIZES,
    "commitlog_file_size": 8 * 1024 * 1024,
    "consume_queue_file_entries": 20_000,
    "index_hash_slots": 20_000,
    "index_max_entries": 100_000,
}


def broker_name(i: int) -> str:
    return f"broker-{chr(ord('a') + i)}"


class LocalCluster:
    def __init__(
        self,
        base_dir: str | Path,
        *,
        brokers: int = 1,
        namesrvs: int = 1,
        cluster_name: str = "DefaultCluster",
        broker: dict[str, Any] | None = None,
        store: dict[str, Any] | None = None,
        namesrv: dict[str, Any] | None = None,
        small_store: bool = True,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.cluster_name = cluster_name
        self._broker_count = brokers
        self._namesrv_count = namesrvs
        self._broker_overrides = dict(broker or {})
        self._store_overrides = {**(SMALL_STORE if small_store else {}), **(store or {})}
        self._namesrv_overrides = dict(namesrv or {})
        self.namesrvs: list[NamesrvApp] = []
        self.brokers: list[BrokerApp] = []
        #: the brokers' clock for pop invisibility and transaction timeouts (a FakeClock in tests)
        self.clock = clock

    @property
    def namesrv_addr(self) -> str:
        return ";".join(self.namesrv_addrs)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [n.address for n in self.namesrvs]

    def broker_config(self, i: int, **overrides: Any) -> BrokerConfig:
        name = overrides.pop("broker_name", broker_name(i))
        store = {**self._store_overrides, **overrides.pop("store", {})}
        store.setdefault("store_dir", str(self.base_dir / name))
        data = {
            "cluster_name": self.cluster_name,
            "broker_name": name,
            "host": "127.0.0.1",
            "port": 0,
            # any free HA port: a broker restarted on its old port would otherwise need port + 1 free too
            "ha_port": 0,
            "namesrv_addrs": self.namesrv_addrs,
            **self._broker_overrides,
            **overrides,
            "store": StoreConfig(**store),
        }
        return BrokerConfig(**data)

    async def start(self) -> None:
        try:
            for _ in range(self._namesrv_count):
                ns = NamesrvApp(NamesrvConfig(host="127.0.0.1", port=0, **self._namesrv_overrides))
                try:
                    await ns.start()
                except BaseException:
                    await ns.close()
                    raise
                self.namesrvs.append(ns)
            for i in range(self._broker_count):
                await self.add_broker(i)
        except BaseException:
            await self.close()
            raise

    async def add_broker(self, i: int | None = None, **overrides: Any) -> BrokerApp:
        """Start one more broker (``i`` picks its name: 0 -> broker-a)."""
        i = len(self.brokers) if i is None else i
        app = BrokerApp(self.broker_config(i, **overrides), clock=self.clock)
        try:
            await app.start()
        except BaseException:
            await app.close()
            raise
        self.brokers.append(app)
        return app

    async def stop_broker(self, app: BrokerApp) -> None:
        await app.close()
        if app in self.brokers:
            self.brokers.remove(app)

    async def create_topic(
        self,
        topic: str,
        queues: int = 4,
        *,
        perm: int = PERM_READ_WRITE,
        brokers: list[BrokerApp] | None = None,
        attributes: dict[str, str] | None = None,
    ) -> None:
        """Create a topic on every (or the given) broker and wait until the nameservers route it."""
        targets = brokers if brokers is not None else [b for b in self.brokers if not b.is_slave]
        for b in targets:
            b.topics.upsert(TopicConfig(topic, queues, queues, perm, attributes=dict(attributes or {})))
            await b.registrar.register_all()
        await self.wait_for_route(topic, len(targets))

    async def wait_for_route(self, topic: str, broker_count: int, timeout: float = 5.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            routes = [ns.registry.route(topic) for ns in self.namesrvs]
            if all(r is not None and len(r.queueDatas) >= broker_count for r in routes):
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"topic {topic} not routed on {broker_count} brokers within {timeout}s")
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        for b in reversed(self.brokers):
            await b.close()
        self.brokers.clear()
        for ns in reversed(self.namesrvs):
            await ns.close()
        self.namesrvs.clear()

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
