"""Test helpers: a broker group of a master and a slave holding the same data.

The slave starts from a copy of the master's store: the master is stopped cleanly, its
store directory (commitlog, consume queues, index, config files, the epoch file) copied, a
SLAVE (broker id 1, same broker name and cluster) started from the copy, and the master
restarted on its own store (on its old port in process). The copy carries the master's
epoch file, so the slave then joins its master over the HA link (it finds it through its
registration) and follows it: messages sent afterwards are replicated as well. End-to-end
replication tests that start a slave with an empty store are in test_replication*.py.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.app import BrokerApp
from pymq.client import ConsumeFromWhere, PushConsumer, consumer_base
from pymq.client.namesrv import NamesrvClient, parse_addrs
from pymq.client.pull_api import PullResult
from pymq.config import BrokerRole
from pymq.errors import PymqError
from pymq.protocol.message import MessageExt
from pymq.testing import DaemonProcess, LocalCluster
from pymq.transport.client import RpcClient
from tests.helpers import wait_until

SLAVE_ID = 1


async def master_and_slave(
    cluster: LocalCluster, master: BrokerApp, *, slave_read_enable: bool = False, **slave_overrides: object
) -> tuple[BrokerApp, BrokerApp]:
    """Give ``master``'s group a slave holding its data; returns the (restarted) master and the slave.

    Both are in ``cluster.brokers`` afterwards; the nameservers route both before this returns.
    """
    cfg = master.config.model_copy(deep=True)
    port = master.address.rpartition(":")[2]
    store = Path(cfg.store.store_dir)
    await cluster.stop_broker(master)
    copy = store.with_name(store.name + "-slave")
    shutil.copytree(store, copy)
    (copy / "lock").unlink(missing_ok=True)
    slave = await cluster.add_broker(
        broker_name=cfg.broker_name,
        broker_id=SLAVE_ID,
        role=BrokerRole.SLAVE.value,
        slave_read_enable=slave_read_enable,
        store={"store_dir": str(copy)},
        **slave_overrides,
    )
    cfg.port = int(port)
    restarted = await start_broker(cluster, cfg)
    await wait_for_group(cluster, cfg.broker_name, {0: restarted.address, SLAVE_ID: slave.address})
    return restarted, slave


async def start_broker(cluster: LocalCluster, config: object) -> BrokerApp:
    """Start a broker from a full config (a restarted master) and add it to ``cluster``."""
    app = BrokerApp(config)  # type: ignore[arg-type]
    try:
        await app.start()
    except BaseException:
        await app.close()
        raise
    cluster.brokers.append(app)
    return app


async def wait_for_group(cluster: LocalCluster, broker_name: str, addrs: dict[int, str], timeout: float = 10) -> None:
    """Wait until every nameserver lists exactly ``addrs`` (broker id -> address) for ``broker_name``."""
    deadline = time.monotonic() + timeout
    while True:
        tables = [ns.registry.brokers.get(broker_name) for ns in cluster.namesrvs]
        if all(bd is not None and bd.brokerAddrs == addrs for bd in tables):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{broker_name} not routed as {addrs} within {timeout}s: {tables}")
        await asyncio.sleep(0.02)


def master_and_slave_daemons(
    master: DaemonProcess,
    *slave_args: str,
    processes: list[DaemonProcess],
    slave_env: dict[str, str] | None = None,
) -> tuple[DaemonProcess, DaemonProcess]:
    """The same for real processes: ``master`` (started with ``broker_process``) gets a slave.

    The master is stopped with SIGTERM, its ``--store-dir`` copied, a ``--role SLAVE
    --broker-id 1`` daemon started on the copy (``slave_args`` added), and the master started
    again with its own arguments (a new port). Both go into ``processes``.
    """
    store = Path(master.args[master.args.index("--store-dir") + 1])
    assert master.stop() == 0, master.output()
    copy = store.with_name(store.name + "-slave")
    shutil.copytree(store, copy)
    (copy / "lock").unlink(missing_ok=True)
    args = list(master.args)
    args[args.index("--store-dir") + 1] = str(copy)
    args += ["--role", "SLAVE", "--broker-id", str(SLAVE_ID), *slave_args]
    slave = DaemonProcess("broker", args, master.workdir, env={**master.env, **(slave_env or {})})
    processes.append(slave.start())
    restarted = DaemonProcess("broker", list(master.args), master.workdir, env=master.env)
    processes.append(restarted.start())
    return restarted, slave


async def group_addrs(namesrv: str, topic: str, broker_name: str) -> dict[int, str]:
    """``broker_name``'s addresses in ``topic``'s route (empty if not routed)."""
    async with RpcClient() as rpc:
        try:
            route = await NamesrvClient(rpc, parse_addrs(namesrv)).route_or_none(topic)
        except PymqError:
            return {}
    bd = route.broker(broker_name) if route is not None else None
    return dict(bd.brokerAddrs) if bd else {}


# --- consumers watched across a master's absence ------------------------------------------------


def fast_client_options(interval: float, persist: float) -> dict[str, Any]:
    """Client options for tests of a master going away: rebalance and heartbeat every ``interval`` s,
    offsets persisted every ``persist`` s, the route polled every 0.5 s."""
    return {
        "rebalance_interval_seconds": interval,
        "heartbeat_interval_seconds": interval,
        "persist_offset_interval_seconds": persist,
        "poll_namesrv_interval_seconds": 0.5,
    }


def record_pull_addrs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The broker address of every pull answer the consumers get from now on, in order."""
    addrs: list[str] = []
    real = consumer_base.pull

    async def recording(*args: Any, **kwargs: Any) -> PullResult:
        result = await real(*args, **kwargs)
        addrs.append(result.addr)
        return result

    monkeypatch.setattr(consumer_base, "pull", recording)
    return addrs


def slow_consumer(namesrv: str, group: str, instance: str, topic: str, **options: Any) -> PushConsumer:
    """A push consumer of ``topic`` from its first offset, two messages a pull and one batch held
    per queue: most messages are still on the broker when the test takes the master away."""
    c = PushConsumer(
        namesrv,
        group,
        instance_name=instance,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        pull_batch_size=2,
        pull_threshold_for_queue=1,
        **options,
    )
    c.subscribe(topic)
    return c


def collect_bodies(c: PushConsumer, seen: list[bytes], pause: float) -> None:
    """Consume concurrently, appending every body to ``seen`` and taking ``pause`` s a batch."""

    @c.listener
    async def on(msgs: list[MessageExt]) -> None:
        seen.extend(m.body for m in msgs)
        await asyncio.sleep(pause)


class OrderlyLog:
    """Consume orderly, logging the queue offsets consumed per queue id (0.05 s a batch)."""

    def __init__(self, c: PushConsumer) -> None:
        self.consumer = c
        self.consumed: dict[int, list[int]] = {}
        c.orderly_listener(self.on)

    async def on(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            self.consumed.setdefault(m.queue_id, []).append(m.queue_offset)
        await asyncio.sleep(0.05)

    def total(self) -> int:
        return sum(len(v) for v in self.consumed.values())

    async def paused(self, topic: str) -> int:
        """Wait for the consumer's locks on ``topic``'s queues to lapse (the master is gone), then
        check nothing more is consumed over a second of renewals; returns the count it stopped at."""
        c = self.consumer
        await wait_until(
            lambda: all(not pq.locked for mq, pq in c.process_queues.items() if mq.topic == topic),
            timeout=10,
            what="locks lapsed",
        )
        await asyncio.sleep(0.3)  # a batch under way when the lock lapsed finishes
        paused_at = self.total()
        await asyncio.sleep(1.0)  # several renewals: no lock anywhere, nothing consumed
        assert self.total() == paused_at
        return paused_at


# --- slaves started with an empty store (test_replication*.py, test_failover_services.py) -------------


def commitlog(b: BrokerApp) -> bytes:
    store = b.store
    assert store is not None
    return b"".join(bytes(v) for v in store.read_commitlog(0, store.commitlog.max_offset))


def caught_up(master: BrokerApp, slave: BrokerApp) -> bool:
    assert master.store is not None and slave.store is not None
    return slave.store.commitlog.max_offset == master.store.commitlog.max_offset


async def add_slave(
    cluster: LocalCluster, master: BrokerApp, tmp_path: Path, name: str = "slave", **kw: Any
) -> BrokerApp:
    return await cluster.add_broker(
        0, broker_id=kw.pop("broker_id", 1), role="SLAVE", master_addr=master.address,
        store={"store_dir": str(tmp_path / name)}, **kw,
    )  # fmt: skip
