"""The nameserver's series, read from its route registry at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from pymq import __version__

if TYPE_CHECKING:
    from pymq.config import NamesrvConfig
    from pymq.nameserver.registry import RouteRegistry
    from pymq.transport.dispatch import Dispatcher
    from pymq.transport.server import RpcServer


class NamesrvView(Protocol):
    """What the nameserver's metrics read (the nameserver app provides it)."""

    @property
    def config(self) -> NamesrvConfig: ...
    @property
    def address(self) -> str: ...
    @property
    def registry(self) -> RouteRegistry: ...
    @property
    def dispatcher(self) -> Dispatcher: ...
    @property
    def server(self) -> RpcServer: ...


class NamesrvCollector:
    """A custom collector: ``collect()`` runs on the event loop for every scrape."""

    def __init__(self, app: NamesrvView, *, started_at: float) -> None:
        self.app = app
        self.started_at = started_at

    def collect(self) -> Iterator[Any]:
        app = self.app
        reg = app.registry
        yield InfoMetricFamily(
            "pymq_namesrv",
            "This nameserver: address, version.",
            value={"address": app.address, "version": __version__},
        )
        yield GaugeMetricFamily(
            "pymq_uptime_seconds", "Seconds since the daemon started.", value=time.time() - self.started_at
        )
        yield GaugeMetricFamily(
            "pymq_connections", "Open connections (brokers and clients).", value=len(app.server.connections)
        )
        yield GaugeMetricFamily(
            "pymq_namesrv_live_brokers", "Broker addresses with a live registration.", value=len(reg.live)
        )
        yield GaugeMetricFamily(
            "pymq_namesrv_broker_groups",
            "Broker groups (broker names) with a live member.",
            value=len(reg.brokers),
        )
        yield GaugeMetricFamily("pymq_namesrv_topics", "Topics with a route.", value=len(reg.topic_queues))
        age = GaugeMetricFamily(
            "pymq_namesrv_broker_heartbeat_age_seconds",
            f"Seconds since each broker's last registration (dropped after {reg.expiry_seconds:g} s).",
            labels=["cluster", "broker", "broker_id", "address"],
        )
        now = reg.clock()
        for addr, info in sorted(reg.live.items()):
            age.add_metric(
                [info.cluster, info.broker_name, str(info.broker_id), addr], max(0.0, now - info.last_update)
            )
        yield age
        controller = getattr(app, "controller", None)
        if controller is not None:
            active = GaugeMetricFamily(
                "pymq_controller_active", "1 while this nameserver's controller is the active one (0: standby)."
            )
            active.add_metric([], 1 if controller.active() else 0)
            yield active
            yield from controller_series(controller.core)


def controller_series(core: Any) -> Iterator[Any]:
    """The failover controller's series (issue 32): elections, epochs, sync-state set sizes."""
    elections = CounterMetricFamily(
        "pymq_controller_elections", "Masters elected by this controller since it started.", labels=["group"]
    )
    epoch = GaugeMetricFamily("pymq_controller_epoch", "Each broker group's current epoch.", labels=["group"])
    sync = GaugeMetricFamily(
        "pymq_controller_sync_state_set_size",
        "Replicas in each group's sync-state set (the master included).",
        labels=["group"],
    )
    alive = GaugeMetricFamily(
        "pymq_controller_master_alive", "1 while the group has a master with a live heartbeat.", labels=["group"]
    )
    for name, g in sorted(core.groups.items()):
        elections.add_metric([name], core.election_counts.get(name, 0))
        epoch.add_metric([name], g.epoch)
        sync.add_metric([name], len(g.sync_set))
        alive.add_metric([name], 1 if g.master is not None and core.heartbeats.alive(g.master) else 0)
    yield from (elections, epoch, sync, alive)
