"""The broker's series, read from its live state at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from pymq import __version__

if TYPE_CHECKING:
    from pymq.broker.consumers import ConsumerManager
    from pymq.broker.ha.replication import Replication
    from pymq.broker.long_polling import PullHoldService
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.role.state import RoleMachine
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.timer.service import TimerService
    from pymq.broker.topics import TopicConfigManager
    from pymq.broker.transaction.feature import Transactions
    from pymq.config import BrokerConfig
    from pymq.transport.dispatch import Dispatcher
    from pymq.transport.server import RpcServer


class BrokerView(Protocol):
    """What the broker's metrics read (the broker app provides it; metrics never import the app)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def address(self) -> str: ...
    @property
    def started_at(self) -> float: ...
    @property
    def store(self) -> MessageStore | None: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def offsets(self) -> ConsumerOffsetManager: ...
    @property
    def consumers(self) -> ConsumerManager: ...
    @property
    def pull_hold(self) -> PullHoldService: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def role(self) -> RoleMachine: ...
    @property
    def server(self) -> RpcServer: ...
    @property
    def dispatcher(self) -> Dispatcher: ...
    @property
    def replication(self) -> Replication | None: ...
    @property
    def transaction(self) -> Transactions: ...
    @property
    def timer(self) -> TimerService | None: ...


def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def per_topic(name: str, doc: str, table: dict[str, int]) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=["topic"])
    for topic, value in sorted(table.items()):
        fam.add_metric([topic], value)
    return fam


def clients_per_group(name: str, doc: str, groups: dict[str, Any]) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=["group"])
    for group, channels in sorted(groups.items()):
        fam.add_metric([group], len(channels))
    return fam


class BrokerCollector:
    """A custom collector: ``collect()`` runs on the event loop for every scrape."""

    def __init__(self, app: BrokerView) -> None:
        self.app = app

    def collect(self) -> Iterator[Any]:
        app = self.app
        cfg = app.config
        yield InfoMetricFamily(
            "pymq_broker",
            "This broker: cluster, group, id, role, address, version.",
            value={
                "cluster": cfg.cluster_name,
                "broker": cfg.broker_name,
                "broker_id": str(app.role.current.broker_id),
                "role": app.role.current.name,
                "address": app.address,
                "version": __version__,
            },
        )
        yield gauge("pymq_uptime_seconds", "Seconds since the daemon started.", self._uptime())
        yield from self._traffic()
        yield from self._store()
        yield from self._clients()
        yield self._lag()
        yield from self._replication()
        yield from self._transactions()
        yield from self._timers()

    def _timers(self) -> Iterator[Any]:
        timer = self.app.timer
        if timer is None or timer.files is None:  # a slave, timer_enable off, or not started
            return
        fam = GaugeMetricFamily(
            "pymq_timer_pending_messages", "Timer messages not yet delivered, by topic.", labels=["topic"]
        )
        for topic, n in sorted(timer.pending_by_topic.items()):
            fam.add_metric([topic], n)
        yield fam
        yield CounterMetricFamily(
            "pymq_timer_delivered_messages", "Timer messages delivered since start.", value=timer.delivered
        )
        yield gauge(
            "pymq_timer_delivery_lag_seconds",
            "How far the timer wheel's delivery cursor is behind the clock (about 1 s when idle).",
            timer.status()["timerCursorLagMs"] / 1000,
        )

    def _uptime(self) -> float:
        started = self.app.started_at
        return time.time() - started if started else 0.0

    def _traffic(self) -> Iterator[Any]:
        # Counters only: rates (messages/s) are PromQL's job, rate(pymq_put_messages_total[1m]).
        stats = self.app.stats
        yield per_topic("pymq_put_messages", "Messages stored, by topic.", stats.put_msgs)
        yield per_topic("pymq_put_bytes", "Bytes of stored records, by topic.", stats.put_bytes)
        yield per_topic("pymq_get_messages", "Messages returned to pulls, by topic.", stats.get_msgs)
        yield per_topic("pymq_get_bytes", "Bytes of records returned to pulls, by topic.", stats.get_bytes)
        yield CounterMetricFamily("pymq_put_failures", "Messages the store refused.", value=stats.put_failed)

    def _store(self) -> Iterator[Any]:
        store = self.app.store
        if store is None or not store.running:
            return
        cl_max = store.max_phy_offset
        flushed = store.flushed_offset
        yield gauge("pymq_store_size_bytes", "Bytes of commitlog, consume-queue and index files.", store.disk_bytes())
        yield gauge("pymq_disk_used_ratio", "Used fraction of the store's disk (0..1).", store.disk_ratio())
        yield gauge(
            "pymq_disk_full",
            "1 while the store refuses writes because the disk is full.",
            int(store.disk_full),
        )
        yield gauge(
            "pymq_store_queue_file_backlog",
            "1 while the store refuses writes because new consume-queue files are not being made.",
            int(store.queue_file_backlog is not None),
        )
        yield gauge(
            "pymq_store_pending_queue_files",
            "New consume-queue files waiting to be made (their entries buffered in memory).",
            store.pending_queue_files,
        )
        yield gauge(
            "pymq_commitlog_min_offset_bytes",
            "First physical offset (bytes) still in the commitlog.",
            store.min_phy_offset,
        )
        yield gauge("pymq_commitlog_max_offset_bytes", "Physical offset (bytes) after the last stored record.", cl_max)
        yield gauge("pymq_commitlog_flushed_offset_bytes", "Physical offset (bytes) flushed to disk.", flushed)
        yield gauge(
            "pymq_commitlog_unflushed_bytes",
            "Stored bytes not yet flushed to disk.",
            max(0, cl_max - flushed),
        )
        yield gauge("pymq_topics", "Topics configured on this broker.", len(self.app.topics.topics))

    def _clients(self) -> Iterator[Any]:
        app = self.app
        consumers = app.consumers
        yield gauge("pymq_connections", "Open client connections.", len(app.server.connections))
        yield clients_per_group(
            "pymq_consumer_clients",
            "Consumer clients connected, by group.",
            {g: info.channels for g, info in consumers.groups.items()},
        )
        yield clients_per_group("pymq_producer_clients", "Producer clients connected, by group.", consumers.producers)
        yield gauge("pymq_held_pulls", "Pull requests held by long polling.", app.pull_hold.held_count)

    def _transactions(self) -> Iterator[Any]:
        tx, hook = self.app.transaction.maybe_service(), self.app.transaction.hook
        if tx is None:
            return
        yield CounterMetricFamily(
            "pymq_transaction_half_messages", "Transactional (half) messages received.", value=hook.halves
        )
        yield CounterMetricFamily("pymq_transaction_commits", "Half messages committed.", value=tx.commits)
        yield CounterMetricFamily("pymq_transaction_rollbacks", "Half messages rolled back.", value=tx.rollbacks)
        yield CounterMetricFamily(
            "pymq_transaction_checks", "Check-backs of half messages (put back and asked).", value=tx.checks
        )
        yield gauge(
            "pymq_transaction_pending_messages",
            "Half messages waiting for a commit or rollback (as of the last check round).",
            len(tx.live),
        )
        yield CounterMetricFamily(
            "pymq_transaction_discarded",
            "Half messages moved to TRANS_CHECK_MAX_TIME_TOPIC after their last check-back.",
            value=tx.discarded,
        )

    def _lag(self) -> GaugeMetricFamily:
        fam = GaugeMetricFamily(
            "pymq_consumer_lag_messages",
            "Messages behind: queue max offset minus the group's committed offset.",
            labels=["group", "topic", "queue"],
        )
        store = self.app.store
        if store is None or not store.running:
            return fam
        for key, offsets in sorted(self.app.offsets.table.items()):
            topic, _, group = key.partition("@")
            for queue_id, committed in sorted(offsets.items()):
                if committed >= 0:
                    lag = max(0, store.max_offset(topic, queue_id) - committed)
                    fam.add_metric([group, topic, str(queue_id)], lag)
        return fam

    def _replication(self) -> Iterator[Any]:
        rep = self.app.replication
        store = self.app.store
        if rep is None or store is None or not store.running:
            return
        yield gauge("pymq_replication_epoch", "Epoch of the newest master term this broker knows.", rep.epochs.epoch)
        lag = GaugeMetricFamily(
            "pymq_replication_lag_bytes",
            "Commitlog bytes a slave is behind its master: on a master one series per connected slave, "
            "on a slave one for its master.",
            labels=["peer"],
        )
        if rep.master is not None:
            top = store.max_phy_offset
            slaves = list(rep.master.acks.slaves.values())
            for s in slaves:
                lag.add_metric([s.address], max(0, top - s.acked))
            in_sync = len(rep.master.acks.in_sync())
            yield gauge("pymq_replication_in_sync_slaves", "Slaves in the master's sync-state set.", in_sync)
        if rep.slave is not None:
            lag.add_metric([rep.slave.master_ha_addr or ""], rep.slave.lag_bytes)
        yield lag
