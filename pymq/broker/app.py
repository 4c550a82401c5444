"""The broker process: owns the store, the RPC server, the managers and every background service.

This module only wires: each handler family gets the collaborators it needs (store,
topics, offsets ...), never the app, and is registered once; the broker's role is one
:class:`~pymq.broker.role.state.RoleMachine` that handlers read per request and the write
gate and master services follow (a role change swaps no handler); runtime
config changes reach the managers through :class:`~pymq.broker.runtime_config.RuntimeConfig`;
background work runs as :class:`~pymq.broker.service.Service` objects.

Start order: bind the listening socket (so the advertised address, which goes into every
stored record, is known), start the store (recovery), load the config files, register the
handlers, start the services, serve, then the serving services (periodic scans, nameserver
registration). Close runs it backwards: unregister, stop serving (held pulls are
answered), stop services, persist offsets, shut the store down cleanly.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from pymq import __version__
from pymq.broker.consumers import ClientChannel, ConsumerManager
from pymq.broker.delay.hook import DelayHook
from pymq.broker.delay.service import ScheduleService
from pymq.broker.ha.acks import Waiter
from pymq.broker.ha.auth import acl_authenticate
from pymq.broker.ha.handlers import ReplicationHandlers
from pymq.broker.ha.meta_sync import SlaveMetaSync
from pymq.broker.ha.replication import Replication
from pymq.broker.handlers.admin import AdminHandlers
from pymq.broker.handlers.clients import ClientHandlers
from pymq.broker.handlers.locks import LockHandlers
from pymq.broker.handlers.offsets import OffsetHandlers
from pymq.broker.handlers.operator import operator_families
from pymq.broker.handlers.pull import PullHandlers
from pymq.broker.handlers.query import QueryHandlers
from pymq.broker.handlers.send import SendHandlers
from pymq.broker.hosts import BrokerParts
from pymq.broker.locks import QueueLockManager
from pymq.broker.long_polling import PullHoldService
from pymq.broker.offsets import ConsumerOffsetManager
from pymq.broker.pop.feature import Pop
from pymq.broker.pop.revive import PopState
from pymq.broker.priority import PriorityHook, PriorityInterceptor, PriorityService
from pymq.broker.put_order import ordered_hooks
from pymq.broker.put_path import PutPath
from pymq.broker.registration import NamesrvRegistrar
from pymq.broker.remoting import RemotingContext, remoting_handlers
from pymq.broker.retry.sendback import SendBackHandlers
from pymq.broker.role.change import RoleChanger
from pymq.broker.role.fencing import fence_at_startup, fence_check, join_controller
from pymq.broker.role.gate import ReadOnlyRole, follow_role
from pymq.broker.role.master_services import MasterServices, Step
from pymq.broker.role.state import RoleMachine
from pymq.broker.runtime_config import RuntimeConfig
from pymq.broker.service import PeriodicService, Service
from pymq.broker.stats import BrokerStats
from pymq.broker.store import MessageStore
from pymq.broker.subscription_groups import SubscriptionGroupManager
from pymq.broker.sync_flush.loop_sync import LoopSync
from pymq.broker.timer.handlers import TimerHandlers
from pymq.broker.timer.service import TimerService
from pymq.broker.topics import TopicConfigManager
from pymq.broker.transaction.feature import Transactions
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.config import BrokerConfig
from pymq.errors import ConfigError
from pymq.logs import get_logger
from pymq.protocol.codes import NAMESRV_REQUEST_CODES, RequestCode
from pymq.protocol.command import Command
from pymq.protocol.requests import ConsumerGroupRequest
from pymq.security.daemon import acl_interceptor, daemon_signer, listener_tls, outgoing_tls
from pymq.transport.client import RpcClient
from pymq.transport.dispatch import Dispatcher
from pymq.transport.limits import limits_from_settings
from pymq.transport.net import advertised_host
from pymq.transport.server import RpcServer, bind_socket, cannot_listen
from pymq.transport.shared_port import shared_port_codec

log = get_logger("broker")


def check_store_dir(path: Path) -> None:
    """Create the store directory and prove it writable; a ConfigError (one line) says why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot use store directory {path}: {exc.strerror or exc}") from exc


class BrokerApp:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.address = ""
        #: the one way config changes at runtime; managers follow it through ``configure``
        self.runtime = RuntimeConfig(config)
        cfg_dir = Path(config.store.store_dir) / "config"
        self.topics = TopicConfigManager(cfg_dir / "topics.json", delay_levels=len(config.store.delay_levels_ms))
        self.offsets = ConsumerOffsetManager(cfg_dir / "consumerOffset.json")
        self.subscription_groups = SubscriptionGroupManager(cfg_dir / "subscriptionGroup.json")
        self.consumers = ConsumerManager(notify=self._notify_ids_changed)
        self.locks = QueueLockManager()
        for manager in (self.topics, self.subscription_groups, self.consumers, self.locks):
            self.runtime.subscribe(manager.configure)
        self.pull_hold = PullHoldService()
        self.stats = BrokerStats()
        #: what the delivering services (schedule, timers, priority refill) get instead of the app
        self.parts = BrokerParts(config=config, topics=self.topics, stats=self.stats, offsets=self.offsets)
        #: SYNC_FLUSH with the C syncer: the group commit's syncs, answered on the loop (made at start)
        self.loop_sync: LoopSync | None = None
        self.dispatcher = Dispatcher(name="broker")
        self.dispatcher.unsupported_remark = self._unsupported_remark
        #: the broker's role: read through this one object, changed only by its transitions
        #: (see broker.role.state; broker.role.change drives them)
        self.role = RoleMachine.from_config(config)
        #: the write gate: on the dispatcher exactly while the role is not writable (broker.role.gate)
        self.read_only = ReadOnlyRole()
        follow_role(self.role, self.dispatcher, self.read_only)
        limits = limits_from_settings(
            config.idle_timeout_seconds, config.frame_read_timeout_seconds, config.max_partial_frame_bytes
        )
        #: RocketMQ 4.x clients' requests (remoting wire, sniffed per connection on the same port; issue 30):
        #: translated onto ``dispatcher``'s handlers (broker.remoting), filled in _register_handlers
        self.remoting_dispatcher = Dispatcher(name="broker-remoting")
        self.server = RpcServer(
            self.dispatcher,
            config.host,
            config.port,
            name="broker",
            limits=limits,
            codec=shared_port_codec(self.remoting_dispatcher),
        )
        #: ACL and TLS are set up in start() (their files must load: a ConfigError there is exit 2)
        self.acl: Any = None
        self.namesrv_client = RpcClient()
        #: master/slave replication (the HA service and the epoch file), wired once the store is up
        self.replication: Replication | None = None
        self.registrar = NamesrvRegistrar(
            config,
            self.topics,
            self.namesrv_client,
            lambda: self.address,
            ha_address=self._ha_address,
            broker_id=lambda: self.role.current.broker_id,
        )
        self.topics.on_change = self.registrar.trigger
        self.role_changer = RoleChanger(self)
        #: controller mode's heartbeat and lease (issue 32; set up in start())
        self.controller_link: Any = None
        self.started_at = 0.0
        self.metrics: Any = None
        self.schedule = ScheduleService(self.parts)
        #: started after the store, before serving, and stopped after serving (replication joins at start)
        self.services: list[Service] = []
        #: what only a master runs (schedule, timers, priority refill, check-back, pop revival), started and
        #: stopped as one with the role (see broker.master_services; filled in start())
        self.master_services = MasterServices()
        #: transactional messages: the half-message put hook, commit/rollback, check-back (masters only)
        self.transaction = Transactions(
            config=config,
            topics=self.topics,
            stats=self.stats,
            producer_channels=self.consumers.producer_channels,
            address=lambda: self.address,
            clock=clock,
        )
        # --- timer messages (issue 17): its put hook wherever timer_enable (a slave's copy of the
        # timer topic gets the same consume-queue entries); only masters run the service ---
        self.timer: TimerService | None = TimerService(self.parts) if config.timer_enable else None
        # --- priority topics (issue 17): masters move messages from level queues on demand (the
        # service and its interceptor run with the master services) ---
        self.priority_hook = PriorityHook(self.topics)
        self.priority = PriorityService(self.parts, self.priority_hook)
        self.priority_interceptor = PriorityInterceptor(self.priority)
        #: pop consumption (RocketMQ 5's SimpleConsumer): served while master
        self.pop = Pop(
            config=config,
            topics=self.topics,
            subscription_groups=self.subscription_groups,
            offsets=self.offsets,
            pull_hold=self.pull_hold,
            stats=self.stats,
            before_read=self.priority.on_pull,
            clock=clock,
        )
        #: started once serving, stopped first (the registrar last in, first out)
        self.serving_services: list[Service] = [
            PeriodicService("client-scan", config.client_scan_interval_seconds, self.consumers.scan_expired),
            PeriodicService("offset-persist", config.offset_flush_interval_seconds, self.offsets.persist_in_thread),
            PeriodicService("stats-sample", 1.0, self.stats.sample),
            PeriodicService("fence-check", config.register_interval_seconds, self._fence_check),
            self.registrar,
        ]

    def _register_handlers(self, store: MessageStore) -> None:
        """Give each handler family the collaborators it needs (once: the store exists from here on)."""
        cfg, address = self.config, self.address
        families: tuple[Any, ...] = (
            SendHandlers(
                store=store,
                put_messages=self.put_path.put,
                topics=self.topics,
                subscription_groups=self.subscription_groups,
                stats=self.stats,
                config=cfg,
                address=address,
                role=self.role,
                wait_replicated=self._wait_replicated,
                loop_sync=self.loop_sync,
                in_sync_replicas=self._in_sync_replicas,
            ),
            SendBackHandlers(
                store=store,
                put_messages=self.put_path.put,
                topics=self.topics,
                subscription_groups=self.subscription_groups,
                stats=self.stats,
            ),
            PullHandlers(
                store=store,
                topics=self.topics,
                subscription_groups=self.subscription_groups,
                offsets=self.offsets,
                consumers=self.consumers,
                pull_hold=self.pull_hold,
                stats=self.stats,
                config=cfg,
                address=address,
                role=self.role,
            ),
            ClientHandlers(
                consumers=self.consumers,
                subscription_groups=self.subscription_groups,
                topics=self.topics,
                role=self.role,
            ),
            OffsetHandlers(
                store=store,
                offsets=self.offsets,
                topics=self.topics,
                consumers=self.consumers,
                broker_name=cfg.broker_name,
                address=address,
                inflight=self.pop.inflight,
            ),
            QueryHandlers(store=store),
            TimerHandlers(timer=self.timer, role=self.role),
            LockHandlers(locks=self.locks),
            self.transaction.handlers(writable=lambda: self.role.current.writable),
            AdminHandlers(
                store=store,
                topics=self.topics,
                offsets=self.offsets,
                subscription_groups=self.subscription_groups,
                consumers=self.consumers,
                runtime=self.runtime,
                runtime_info=self.runtime_info,
                address=address,
                topic_traffic=self.stats.topic_totals,
            ),
            *operator_families(self.consumers, store, cfg.broker_name, lambda: self.acl),
            ReplicationHandlers(delay_offsets=lambda: self.schedule.offsets, role_change=self.role_changer.change),
            self.pop.handlers(store, self.put_path, address),
        )
        table: dict[int, Any] = {}
        for family in families:
            table.update(family.table())
        self.dispatcher.register_many(table)
        ctx = RemotingContext(
            address=address,
            broker_name=cfg.broker_name,
            cluster_name=cfg.cluster_name,
            subscription=self.consumers.subscription_expression,
        )
        self.remoting_dispatcher.register_many(remoting_handlers(self.dispatcher, ctx, self._authenticate_remoting))

    @property
    def store(self) -> MessageStore | None:
        return self.parts.store

    @property
    def put_path(self) -> PutPath:
        return self.parts.put_path

    @property
    def is_slave(self) -> bool:
        return self.role.current.is_slave

    @property
    def pop_state(self) -> PopState | None:
        """Pop's open checkpoints and acks while this broker serves pops (a master), else None."""
        return self.pop.state

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
            raise ConfigError(cannot_listen(cfg.host, cfg.port, exc)) from exc
        port = sock.getsockname()[1]
        self.address = f"{advertised_host(self.config.advertised_host, self.config.host)}:{port}"
        try:
            self._setup_security()
            check_store_dir(cfg.store.store_dir)
            store = self.parts.store = MessageStore(cfg.store, store_host=self.address)
            hooks = ordered_hooks(
                self.transaction.hook,
                DelayHook(cfg.store.delay_levels_ms),
                timer=self.timer.hook if self.timer is not None else None,
                priority=self.priority_hook,
            )
            self.parts.put_path = PutPath(store, hooks)
            # Recovery can take seconds: keep the loop free to handle signals meanwhile.
            await asyncio.to_thread(store.start)
        except BaseException:
            sock.close()
            self._close_metrics()
            raise
        # --- SYNC_FLUSH through the C syncer (issue 19): one for the store's life, handlers come and go ---
        self.loop_sync = LoopSync.for_store(store)
        store.add_arrival_listener(self.pull_hold.notify)
        self.topics.load()
        self.topics.persist()
        self.offsets.load()
        self.subscription_groups.load()
        self.replication = Replication(
            cfg,
            store,
            rpc=self.namesrv_client,
            address=lambda: self.address,
            discovered_master=lambda: self.registrar.master_addr,
            advertised_host=advertised_host(self.config.advertised_host, self.config.host),
            meta_sync=SlaveMetaSync(
                rpc=self.namesrv_client,
                master_addr=self._master_main_addr,
                topics=self.topics,
                offsets=self.offsets,
                subscription_groups=self.subscription_groups,
                delay_offsets_path=self.schedule.path,
                timer_checkpoint_path=self.timer.master_checkpoint_path if self.timer is not None else None,
                interval=lambda: cfg.slave_sync_interval_seconds,
                pop_secret=self.pop.adopt_secret,
            ),
            # the HA link follows the broker's [tls] and [acl]: TLS on its listener and to the master,
            # signed HELLOs checked by the ACL (an admin account) when it is on
            listener_ssl=self.server.ssl,
            connector_ssl=self.namesrv_client.ssl,
            authenticate=acl_authenticate(self.acl) if self.acl is not None else None,
            sign=self.namesrv_client.signer,
            role=self.role,
        )
        self.services.append(self.replication)
        if not self.is_slave and not cfg.controller_mode:  # in controller mode, the controller decides
            await fence_at_startup(self.namesrv_client, cfg, self.address, self.role, self.replication)
        if cfg.controller_mode:
            self.controller_link = await join_controller(
                cfg,
                self.namesrv_client,
                self.role_changer,
                lambda: self.address,
                self.replication,
                store,
                self.dispatcher,
                self.serving_services,
            )
        if self.is_slave:
            self.drop_master_state()  # a slave keeps no delivery state of its own (see drop_master_state)
        self.transaction.open(store, master=not self.is_slave)
        self._build_master_services()
        self._register_handlers(store)
        for svc in self.services:
            await svc.start()
        if not self.is_slave:
            await self.start_master_services()
        await self.server.start(sock)
        self.started_at = time.time()
        for svc in self.serving_services:
            await svc.start()
        log.info(
            "broker_started",
            broker=cfg.broker_name,
            broker_id=self.role.current.broker_id,
            role=self.role.current.name,
            cluster=cfg.cluster_name,
            address=self.address,
            store=str(cfg.store.store_dir),
            flush=cfg.store.flush_disk_type.value,
            pid=os.getpid(),
        )

    def _setup_security(self) -> None:
        """ACL interceptor (first in the chain: nothing is answered to an unsigned peer), TLS on
        the listener, credentials and TLS for the calls to nameservers (issue 20)."""
        cfg = self.config
        self.acl = acl_interceptor(cfg.acl, "broker", self.transaction.acl_resolvers())
        if self.acl is not None:
            self.dispatcher.register_many(self.acl.session_handlers())
            self.dispatcher.add_interceptor(self.acl)
            self.dispatcher.move_first(self.acl)
            self.serving_services.insert(
                0, PeriodicService("acl-reload", cfg.acl.reload_interval_seconds, self.acl.reload_if_changed)
            )
        self.server.ssl = listener_tls(cfg.tls)
        self.namesrv_client.ssl = outgoing_tls(cfg.tls, cfg.namesrv_addrs)
        self.namesrv_client.signer = daemon_signer(cfg.acl)

    # --- master-only services (issue 16: they follow the role; see broker.master_services) -----------------

    def _build_master_services(self) -> None:
        group = self.master_services
        group.add(self.schedule)
        if self.timer is not None:
            group.add(self.timer)
        group.add(Step("priority", self._start_priority, self._stop_priority))
        group.add(Step("transaction-check", self.transaction.start_check, self.transaction.stop_check))
        group.add(self.pop)

    async def start_master_services(self) -> None:
        """Run what a master runs (after startup as master, at a promotion)."""
        await self.master_services.start()

    async def stop_master_services(self) -> None:
        """Stop what a master runs (fence, demotion, close): after this the broker puts nothing itself."""
        await self.master_services.stop()

    def drop_master_state(self) -> None:
        """Delete the delivery state only a master keeps (a slave's, or a demoted master's, is stale):
        the timer files and checkpoint, and the transaction, pop revive and priority positions. A later
        promotion rebuilds them from the replicated topics and what the slave copied from its master."""
        if self.master_services.running:
            raise RuntimeError("drop master state only while the master services are stopped")
        # each feature deletes its own files
        self.transaction.drop_state()
        self.pop.drop_state()
        self.priority.drop_state()
        if self.timer is not None:
            self.timer.drop_files()

    async def _start_priority(self) -> None:
        await self.priority.start()
        self.dispatcher.add_interceptor(self.priority_interceptor)

    async def _stop_priority(self) -> None:
        self.dispatcher.remove_interceptor(self.priority_interceptor)
        await self.priority.stop()

    def _close_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    def _notify_ids_changed(self, group: str, channels: list[ClientChannel]) -> None:
        sg = self.subscription_groups.groups.get(group)
        if sg is not None and not sg.notifyConsumerIdsChangedEnable:
            return
        ext = ConsumerGroupRequest(consumer_group=group).to_ext()
        for ch in channels:
            ch.channel.push_oneway(Command.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, dict(ext)))

    async def close(self, grace: float = 5.0) -> None:
        """Graceful stop: unregister, drain requests, persist state, close the store cleanly."""
        for svc in reversed(self.serving_services):
            await svc.stop()
        self.pull_hold.wake_all()
        await self.server.close(grace)
        await self.master_services.stop()
        for svc in reversed(self.services):
            await svc.stop()
        await self.namesrv_client.close()
        self._close_metrics()
        if self.loop_sync is not None:
            self.loop_sync.close()  # before the store closes its syncer: off the loop, queued syncs answered
        # the config writers' last changes: written on their own threads, waited for here
        await asyncio.to_thread(self.topics.flush)
        await asyncio.to_thread(self.subscription_groups.flush)
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
            "brokerId": self.role.current.broker_id,
            "cluster": self.config.cluster_name,
            "address": self.address,
            "role": self.role.current.flavour.value,
            "roleState": self.role.current.state.value,
            "flushDiskType": self.config.store.flush_disk_type.value,
            "uptimeSeconds": round(time.time() - self.started_at, 1) if self.started_at else 0,
            "storeSizeBytes": store.disk_bytes(),
            "diskRatio": round(store.disk_ratio(), 4),
            "diskFull": store.disk_full,
            "commitLogMinOffset": store.min_phy_offset,
            "commitLogMaxOffset": store.max_phy_offset,
            "commitLogFlushedOffset": store.flushed_offset,
            "putTotal": self.stats.put_total,
            "getTotal": self.stats.get_total,
            "putTps": round(put_tps, 1),
            "getTps": round(get_tps, 1),
            "topics": len(self.topics.topics),
            "connections": len(self.server.connections),
            "consumerGroups": len(self.consumers.groups),
            "heldPulls": self.pull_hold.held_count,
            **(self.replication.info() if self.replication is not None else {}),
            **(self.timer.status() if self.timer is not None and not self.is_slave else {}),
            "fenced": self.role_changer.fenced,
        }

    # --- replication ------------------------------------------------------------------------------------------

    async def _fence_check(self) -> None:
        await fence_check(
            self.namesrv_client, self.config, self.address, self.role, self.role_changer, self.replication
        )

    def _master_main_addr(self) -> str | None:
        """A slave's master (its normal port): what the nameserver answered, else the configured one."""
        return self.registrar.master_addr or self.role.current.master_addr

    def _authenticate_remoting(self, cmd: Command, channel: Any) -> str | Command | None:
        """Under ACL, a 4.x request's signature (AclClientRPCHook); None without ACL."""
        return self.acl.authenticate_remoting(cmd, channel) if self.acl is not None else None

    def _unsupported_remark(self, code: int) -> str | None:
        """A nameserver request sent here (a client given the broker's port as its nameserver)."""
        if code not in NAMESRV_REQUEST_CODES:
            return None
        return (
            f"this address is a pymq broker ({self.config.broker_name}), not a nameserver: give clients "
            f"a nameserver's address, such as {';'.join(self.config.namesrv_addrs)} (where this broker registers)"
        )

    def _ha_address(self) -> str:
        return self.replication.ha_address() if self.replication is not None else ""

    def _in_sync_replicas(self) -> int:
        return self.replication.in_sync_replicas() if self.replication is not None else 1

    def _wait_replicated(self, end: int, waiter: Waiter) -> int | None:
        return self.replication.wait_replicated(end, waiter) if self.replication is not None else None

    def update_runtime_config(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply runtime-changeable settings (what UPDATE_BROKER_CONFIG does)."""
        return self.runtime.update(changes)
