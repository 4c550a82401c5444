"""The nameserver process: RPC server, route registry and the expiry scan."""

from __future__ import annotations

import asyncio
from typing import Any

from pymq.config import NamesrvConfig
from pymq.errors import ConfigError
from pymq.logs import get_logger
from pymq.nameserver.handlers import NamesrvHandlers
from pymq.nameserver.registry import RouteRegistry
from pymq.nameserver.remoting import RemotingNamesrvHandlers
from pymq.security.daemon import acl_interceptor, listener_tls
from pymq.tasks import cancel_and_wait
from pymq.transport.dispatch import Dispatcher
from pymq.transport.limits import limits_from_settings
from pymq.transport.periodic import every
from pymq.transport.server import RpcServer, cannot_listen
from pymq.transport.shared_port import shared_port_codec

log = get_logger("namesrv")


class NamesrvApp:
    """Owns the server and the scan task; ``start()`` binds, ``close()`` stops everything."""

    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.registry = RouteRegistry(expiry_seconds=config.broker_expiry_seconds)
        self.handlers = NamesrvHandlers(self.registry)
        table = self.handlers.table()
        #: the embedded failover controller (issue 32), when ``controller = "embedded"``
        self.controller: Any = None
        if config.controller != "off":
            from pymq.controller.service import ControllerService
            from pymq.controller.store import FileStateStore, StateStore

            store: StateStore
            campaign = None
            if config.controller == "etcd":
                from pymq.controller.etcd_campaign import EtcdCampaign
                from pymq.controller.etcd_store import EtcdGateway, EtcdStateStore

                ttl = config.controller_etcd_lease_seconds
                # a request may take no longer than a third of the lease: a hung etcd member must
                # not hold a keepalive past the leadership's deadline
                gateway = EtcdGateway(config.controller_etcd_endpoints, timeout=min(2.0, max(0.3, ttl / 3)))
                store = EtcdStateStore([], config.controller_etcd_key, gateway=gateway)
                campaign = EtcdCampaign(gateway, config.controller_etcd_leader_key, "", ttl)
            else:
                store = FileStateStore(config.controller_dir)
            self.controller = ControllerService(
                store,
                master_timeout=config.controller_master_timeout_seconds,
                lease=config.controller_lease_seconds,
                unclean_election=config.controller_unclean_election,
                on_election=self._elected,
                campaign=campaign,
            )
            table.update(self.controller.table())
        self.dispatcher = Dispatcher(table, name="namesrv")
        limits = limits_from_settings(
            config.idle_timeout_seconds, config.frame_read_timeout_seconds, config.max_partial_frame_bytes
        )
        #: RocketMQ 4.x clients' requests (remoting wire, sniffed per connection on the same port)
        self.remoting_dispatcher = Dispatcher(RemotingNamesrvHandlers(self.handlers).table(), name="namesrv-remoting")
        self.server = RpcServer(
            self.dispatcher,
            config.host,
            config.port,
            name="namesrv",
            limits=limits,
            codec=shared_port_codec(self.remoting_dispatcher),
        )
        self._scan_task: asyncio.Task[None] | None = None
        #: ACL interceptor and its reload task (set up in start(); issue 20)
        self.acl: Any = None
        self._acl_reload: asyncio.Task[None] | None = None
        self.metrics: Any = None

    @property
    def address(self) -> str:
        return f"{self.config.host if self.config.host != '0.0.0.0' else '127.0.0.1'}:{self.server.port}"

    async def start(self) -> None:
        if self.config.metrics_port is not None:
            # First: a metrics port that cannot be served fails startup before anything is held.
            from pymq.metrics import start_namesrv_metrics

            self.metrics = start_namesrv_metrics(self, self.config.metrics_port)
        try:
            self.acl = acl_interceptor(self.config.acl, "namesrv")
            if self.acl is not None:
                self.dispatcher.register_many(self.acl.session_handlers())
                self.dispatcher.add_interceptor(self.acl)
                self.remoting_dispatcher.add_interceptor(self.acl.remoting_interceptor())
            self.server.ssl = listener_tls(self.config.tls)
            await self.server.start()
        except BaseException as exc:
            if self.metrics is not None:
                self.metrics.close()
            if isinstance(exc, OSError):
                # As the broker says it: a port in use is a configuration that cannot be used.
                host, port = self.config.host, self.config.port
                raise ConfigError(cannot_listen(host, port, exc)) from exc
            raise
        self._scan_task = asyncio.create_task(self._scan_loop(), name="namesrv-expiry-scan")
        if self.controller is not None:
            await self.controller.start(self.config.controller_address or self.address)
        if self.acl is not None:
            self._acl_reload = asyncio.create_task(
                every(self.config.acl.reload_interval_seconds, self.acl.reload_if_changed, name="acl-reload"),
                name="namesrv-acl-reload",
            )
        log.info("namesrv_started", address=self.address)

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_interval_seconds)
            for addr in self.registry.scan_expired():
                log.warning("broker_expired", addr=addr, expiry_seconds=self.config.broker_expiry_seconds)

    def _elected(self, election: Any) -> None:
        """A new master was elected: the old one's routes go now (clients stop sending to it)."""
        if election.old_master and self.registry.remove_addr(election.old_master):
            log.warning("old_master_unrouted", group=election.group, addr=election.old_master)

    async def close(self) -> None:
        if self.controller is not None:
            await self.controller.close()
        for task in (self._scan_task, self._acl_reload):
            await cancel_and_wait(task)
        await self.server.close()
        if self.metrics is not None:
            self.metrics.close()
        log.info("namesrv_stopped")

    async def __aenter__(self) -> NamesrvApp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
