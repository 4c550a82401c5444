"""The broker process: owns the store, the RPC server, the managers and every background task.

Start order: bind the listening socket (so the advertised address, which goes into every
stored record, is known), start the store (recovery), load the config files, serve, then
register with the nameservers. Close runs it backwards: unregister, stop serving (held
pulls are answered), stop tasks, persist offsets, shut the store down cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from pymq import __version__
from pymq.broker.consumers import ClientChannel, ConsumerManager
from pymq.broker.delay_hook import default_put_hooks
from pymq.broker.handlers.admin import AdminHandlers
from pymq.broker.handlers.clients import ClientHandlers
from pymq.broker.handlers.locks import LockHandlers
from pymq.broker.handlers.offsets import OffsetHandlers
from pymq.broker.handlers.pull import PullHandlers
from pymq.broker.handlers.query import QueryHandlers
from pymq.broker.handlers.send import SendHandlers
from pymq.broker.handlers.sendback import SendBackHandlers
from pymq.broker.locks import QueueLockManager
from pymq.broker.long_polling import PullHoldService
from pymq.broker.offsets import ConsumerOffsetManager
from pymq.broker.put_hooks import PutPath
from pymq.broker.registration import NamesrvRegistrar
from pymq.broker.schedule import ScheduleService
from pymq.broker.stats import BrokerStats
from pymq.broker.store import MessageStore
from pymq.broker.subscription_groups import SubscriptionGroupManager
from pymq.broker.topics import TopicConfigManager
from pymq.config import BrokerConfig, BrokerRole
from pymq.errors import ConfigError, InvalidRequestError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.transport.client import RpcClient
from pymq.transport.dispatch import Dispatcher
from pymq.transport.net import local_ip
from pymq.transport.periodic import every
from pymq.transport.server import RpcServer, bind_socket

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
    "store.disk_max_used_ratio",
    "store.disk_clean_forcibly_ratio",
    "store.disk_full_ratio",
    "store.file_reserved_hours",
    "store.delete_when",
    "store.simulated_disk_capacity",
}


class BrokerApp:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.address = ""
        cfg_dir = Path(config.store.store_dir) / "config"
        self.topics = TopicConfigManager(
            cfg_dir / "topics.json",
            default_queue_nums=config.default_topic_queue_nums,
            delay_levels=len(config.store.delay_levels_ms),
            auto_create=config.auto_create_topic,
        )
        self.offsets = ConsumerOffsetManager(cfg_dir / "consumerOffset.json")
        self.subscription_groups = SubscriptionGroupManager(
            cfg_dir / "subscriptionGroup.json", auto_create=config.auto_create_subscription_group
        )
        self.consumers = ConsumerManager(
            expiry_seconds=config.client_channel_expiry_seconds, notify=self._notify_ids_changed
        )
        self.locks = QueueLockManager(config.queue_lock_expiry_seconds)
        self.pull_hold = PullHoldService()
        self.stats = BrokerStats()
        #: (group, topic, queueId) -> client id of the last consumer that pulled it
        self.pull_owners: dict[tuple[str, str, int], str] = {}
        self.store: MessageStore | None = None  # type: ignore[assignment]
        #: every put goes through it: put hooks (delays ...), then the store
        self.put_path: PutPath = None  # type: ignore[assignment]
        self.dispatcher = Dispatcher(name="broker")
        for family in (
            SendHandlers(self),
            SendBackHandlers(self),
            PullHandlers(self),
            ClientHandlers(self),
            OffsetHandlers(self),
            QueryHandlers(self),
            LockHandlers(self),
            AdminHandlers(self),
        ):
            self.dispatcher.register_many(family.table())
        self.server = RpcServer(self.dispatcher, config.host, config.port, name="broker")
        self.namesrv_client = RpcClient()
        self.registrar = NamesrvRegistrar(self, self.namesrv_client)
        self.topics.on_change = self.registrar.trigger
        self.started_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self.metrics: Any = None
        self.schedule = ScheduleService(self)
        #: components started after the store and stopped before it (schedule, later HA ...)
        self.services: list[Any] = [self.schedule]

    @property
    def is_slave(self) -> bool:
        return self.config.role == BrokerRole.SLAVE or self.config.broker_id != 0

    def _advertised_host(self) -> str:
        if self.config.advertised_host:
            return self.config.advertised_host
        if self.config.host in ("0.0.0.0", ""):
            return local_ip()
        return self.config.host

    async def start(self) -> None:
        cfg = self.config
        if cfg.metrics_port is not None:
            # First: a metrics port that cannot be served fails startup before anything is held.
            from pymq.metrics import start_broker_metrics

            self.metrics = start_broker_metrics(self, cfg.metrics_port)
        try:
            sock = bind_socket(cfg.host, cfg.port)
        except OSError as exc:
            self._close_metrics()
            raise ConfigError(f"cannot listen on {cfg.host}:{cfg.port}: {exc}") from exc
        port = sock.getsockname()[1]
        self.address = f"{self._advertised_host()}:{port}"
        try:
            self.store = MessageStore(cfg.store, store_host=self.address)
            self.put_path = PutPath(self.store, default_put_hooks(cfg.store.delay_levels_ms))
            # Recovery can take seconds: keep the loop free to handle signals meanwhile.
            await asyncio.to_thread(self.store.start)
        except BaseException:
            sock.close()
            self._close_metrics()
            raise
        self.store.add_arrival_listener(self.pull_hold.notify)
        self.topics.load()
        self.topics.persist()
        self.offsets.load()
        self.subscription_groups.load()
        for svc in self.services:
            await svc.start()
        await self.server.start(sock)
        self.started_at = time.time()
        self._spawn(every(cfg.client_scan_interval_seconds, self._scan_clients), "client-scan")
        self._spawn(every(cfg.offset_flush_interval_seconds, self._persist_offsets), "offset-persist")
        self._spawn(every(1.0, self._sample_stats), "stats-sample")
        await self.registrar.register_all()
        self.registrar.start()
        log.info(
            "broker_started",
            broker=cfg.broker_name,
            broker_id=cfg.broker_id,
            cluster=cfg.cluster_name,
            address=self.address,
            store=str(cfg.store.store_dir),
            flush=cfg.store.flush_disk_type.value,
            pid=os.getpid(),
        )

    def _close_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        self._tasks.append(asyncio.ensure_future(coro))
        self._tasks[-1].set_name(f"broker-{name}")

    def _scan_clients(self) -> None:
        self.consumers.scan_expired()

    def _persist_offsets(self) -> None:
        self.offsets.persist_if_dirty()

    def _sample_stats(self) -> None:
        self.stats.sample()

    def _notify_ids_changed(self, group: str, channels: list[ClientChannel]) -> None:
        sg = self.subscription_groups.groups.get(group)
        if sg is not None and not sg.notifyConsumerIdsChangedEnable:
            return
        for ch in channels:
            ch.conn.push_oneway(Command.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))

    async def close(self, grace: float = 5.0) -> None:
        """Graceful stop: unregister, drain requests, persist state, close the store cleanly."""
        await self.registrar.stop()
        if self.store is not None and self.store.running:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.registrar.unregister_all(), timeout=3.0)
        self.pull_hold.wake_all()
        await self.server.close(grace)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        for svc in reversed(self.services):
            await svc.stop()
        await self.namesrv_client.close()
        self._close_metrics()
        if self.store is not None and self.store.running:
            self.offsets.persist()
            await asyncio.to_thread(self.store.shutdown)
        log.info("broker_stopped", broker=self.config.broker_name, address=self.address)

    async def __aenter__(self) -> BrokerApp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- admin support ----------------------------------------------------------------------------------------

    def runtime_info(self) -> dict[str, Any]:
        store = self.store
        assert store is not None
        put_tps, get_tps = self.stats.rates()
        return {
            "version": __version__,
            "brokerName": self.config.broker_name,
            "brokerId": self.config.broker_id,
            "cluster": self.config.cluster_name,
            "address": self.address,
            "role": self.config.role.value,
            "flushDiskType": self.config.store.flush_disk_type.value,
            "uptimeSeconds": round(time.time() - self.started_at, 1) if self.started_at else 0,
            "storeSizeBytes": store.disk_bytes(),
            "diskRatio": round(store.disk_ratio(), 4),
            "diskFull": store.disk_full,
            "commitLogMinOffset": store.commitlog.min_offset,
            "commitLogMaxOffset": store.commitlog.max_offset,
            "commitLogFlushedOffset": store.flushed_offset,
            "putTotal": self.stats.put_total,
            "getTotal": self.stats.get_total,
            "putTps": round(put_tps, 1),
            "getTps": round(get_tps, 1),
            "topics": len(self.topics.topics),
            "connections": len(self.server.connections),
            "consumerGroups": len(self.consumers.groups),
            "heldPulls": self.pull_hold.held_count,
        }

    def update_runtime_config(self, changes: dict[str, Any]) -> dict[str, Any]:
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
            *path, last = key.split(".")
            src: Any = new
            dst: Any = self.config
            for p in path:
                src = getattr(src, p)
                dst = getattr(dst, p)
            setattr(dst, last, getattr(src, last))
            applied[key] = getattr(src, last)
        self.topics.auto_create = self.config.auto_create_topic
        self.subscription_groups.auto_create = self.config.auto_create_subscription_group
        self.topics.default_queue_nums = self.config.default_topic_queue_nums
        self.consumers.expiry_seconds = self.config.client_channel_expiry_seconds
        self.locks.expiry_seconds = self.config.queue_lock_expiry_seconds
        log.info("broker_config_updated", changes=applied)
        return applied
