"""Replication in the admin view and the Prometheus series: runtime info, cluster-list, gauges."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.cli.admin_replication import replication_columns
from pymq.client import Message, Producer
from pymq.client.admin import AdminClient
from pymq.testing import LocalCluster
from tests.helpers import wait_until
from tests.master_slave import add_slave, caught_up
from tests.metrics_helpers import scrape, value

pytestmark = pytest.mark.integration


async def test_replication_gauges_runtime_info_and_cluster_list(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"metrics_port": 0}) as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 2)
        slave = await add_slave(cluster, master, tmp_path)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(20):
                await p.send(Message("t", f"m-{i}".encode() * 20))
        await wait_until(lambda: caught_up(master, slave), 10)
        assert master.store is not None
        top = master.store.commitlog.max_offset
        await wait_until(lambda: master.runtime_info()["slaves"][0]["ackOffset"] == top, 10)

        m_info, s_info = master.runtime_info(), slave.runtime_info()
        assert m_info["slaves"] == [
            {"address": slave.address, "brokerId": 1, "ackOffset": top, "lagBytes": 0, "inSync": True}
        ]
        assert (m_info["inSyncSlaves"], m_info["replicationLagBytes"], m_info["epoch"]) == (1, 0, 1)
        assert s_info["slaveOffset"] == top and s_info["masterAddress"] == master.address
        assert s_info["masterHaAddress"] == m_info["haAddress"] and s_info["masterMaxOffset"] == top

        _, ms = await scrape(master.metrics.url)
        assert value(ms, "pymq_replication_lag_bytes", peer=slave.address) == 0
        assert value(ms, "pymq_replication_in_sync_slaves") == 1
        assert value(ms, "pymq_replication_epoch") == 1
        _, ss = await scrape(slave.metrics.url)
        assert value(ss, "pymq_replication_lag_bytes", peer=m_info["haAddress"]) == 0

        async with AdminClient(cluster.namesrv_addr) as admin:
            rows = [
                {"addr": master.address, "role": "master"},
                {"addr": slave.address, "role": "slave"},
                {"addr": "127.0.0.1:1", "role": "slave"},
            ]
            await replication_columns(admin, rows)
        assert [(r["role"], r["epoch"], r["lagBytes"]) for r in rows] == [
            ("ASYNC_MASTER", 1, 0),
            ("SLAVE", 1, 0),
            ("unreachable", "", ""),
        ]
