"""Master/slave replication in process (LocalCluster): streaming, SYNC_MASTER answers, refusals.

Crash scenarios (kill -9, restarts) run on real processes in test_replication_daemons.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.broker.ha import codec as ha_codec
from pymq.broker.store import MessageStore
from pymq.broker.store.config_files import read_json
from pymq.broker.subscription_groups import SubscriptionGroupConfig
from pymq.client import Message, Producer
from pymq.client.admin import AdminClient
from pymq.client.admin_replication import group_members, promote_slave
from pymq.client.producer import SendStatus
from pymq.errors import SystemError_
from pymq.testing import LocalCluster
from pymq.testing.logs import capture_logs
from tests.helpers import wait_until
from tests.master_slave import add_slave, caught_up, commitlog

pytestmark = pytest.mark.integration


async def test_async_master_streams_commitlog_queues_and_index(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 4)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(50):  # some before the slave exists
                await p.send(Message("t", f"early-{i}".encode(), keys=[f"k{i}"]))
            slave = await add_slave(cluster, master, tmp_path)
            for i in range(50, 300):
                await p.send(Message("t", f"m-{i}".encode() * 50, keys=[f"k{i}"]))
        await wait_until(lambda: caught_up(master, slave), 20, what="slave caught up")
        assert commitlog(slave) == commitlog(master)
        assert master.store is not None and slave.store is not None
        for q in range(4):
            assert slave.store.max_offset("t", q) == master.store.max_offset("t", q)
        assert [bytes(r) for r in slave.store.query_by_key("t", "k123")] == [
            bytes(r) for r in master.store.query_by_key("t", "k123")
        ]
        info = master.runtime_info()
        assert info["epoch"] == 1 and info["haAddress"]
        await wait_until(lambda: master.runtime_info()["slaves"][0]["ackOffset"] == master.store.commitlog.max_offset)
        sinfo = slave.runtime_info()
        assert sinfo["masterHaAddress"] == info["haAddress"] and sinfo["masterConnected"]
        assert sinfo["epochs"] == [[1, 0]] and sinfo["replicationLagBytes"] == 0


async def test_sync_master_answers_after_the_slave_holds_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with LocalCluster(tmp_path / "c", broker={"role": "SYNC_MASTER", "slave_ack_timeout_ms": 1500}) as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 2)
        async with Producer(cluster.namesrv_addr, retry_times=0) as p:
            # No slave yet: stored, but SLAVE_NOT_AVAILABLE.
            r = await p.send(Message("t", b"alone"))
            assert r.status == SendStatus.SLAVE_NOT_AVAILABLE
            slave = await add_slave(cluster, master, tmp_path)
            await wait_until(lambda: caught_up(master, slave), 20)
            await wait_until(lambda: master.runtime_info().get("inSyncSlaves") == 1, 10)
            for i in range(30):
                r = await p.send(Message("t", f"sync-{i}".encode()))
                assert r.status == SendStatus.SEND_OK
                # Acknowledged: the slave holds it byte for byte, right now.
                assert commitlog(slave) == commitlog(master)
            # A slave that stays connected but stops acking: stored, FLUSH_SLAVE_TIMEOUT.
            monkeypatch.setattr(ha_codec, "encode_ack", lambda offset: b"")
            r = await p.send(Message("t", b"late"))
            assert r.status == SendStatus.FLUSH_SLAVE_TIMEOUT
            await wait_until(lambda: caught_up(master, slave), 10)  # stored, and replicated all the same
            monkeypatch.undo()
            # A slave that goes away: SLAVE_NOT_AVAILABLE at once (the message is stored).
            assert slave.replication is not None
            await slave.replication.stop()
            await wait_until(lambda: not master.runtime_info()["slaves"], 10)
            before = master.store.commitlog.max_offset if master.store else 0
            r = await p.send(Message("t", b"gone"))
            assert r.status == SendStatus.SLAVE_NOT_AVAILABLE
            assert master.store is not None and master.store.commitlog.max_offset > before


async def test_min_in_sync_replicas_refuses_sends_before_storing_until_a_slave_is_in_sync(tmp_path: Path) -> None:
    broker = {"role": "SYNC_MASTER", "slave_ack_timeout_ms": 1500, "min_in_sync_replicas": 2}
    async with LocalCluster(tmp_path / "c", broker=broker) as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 2)
        assert master.store is not None
        async with Producer(cluster.namesrv_addr, retry_times=0) as p:
            before = master.store.commitlog.max_offset
            with pytest.raises(SystemError_) as refused:
                await p.send(Message("t", b"alone"))
            assert refused.value.code == 1  # SYSTEM_ERROR, as RocketMQ 5 answers IN_SYNC_REPLICAS_NOT_ENOUGH
            assert "in-sync replicas not enough: 1 in sync" in str(refused.value)
            assert master.store.commitlog.max_offset == before  # refused before storing: nothing to lose
            slave = await add_slave(cluster, master, tmp_path)
            await wait_until(lambda: caught_up(master, slave), 20)
            await wait_until(lambda: master.runtime_info().get("inSyncSlaves") == 1, 10)
            r = await p.send(Message("t", b"two in sync"))
            assert r.status == SendStatus.SEND_OK
            assert commitlog(slave) == commitlog(master)
            assert slave.replication is not None
            await slave.replication.stop()
            await wait_until(lambda: not master.runtime_info()["slaves"], 10)
            with pytest.raises(SystemError_, match="in-sync replicas not enough"):
                await p.send(Message("t", b"slave gone"))


async def test_a_slave_of_another_store_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", brokers=2) as cluster:
        master, other = cluster.brokers
        await cluster.create_topic("t", 2)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(40):
                await p.send(Message("t", f"m-{i}".encode()))
        foreign_dir = Path(other.config.store.store_dir)
        await cluster.stop_broker(other)  # broker-b's store: data and an epoch list of its own
        assert master.store is not None
        with capture_logs() as logs:
            slave = await cluster.add_broker(
                0, broker_id=1, role="SLAVE", master_addr=master.address, store={"store_dir": str(foreign_dir)}
            )
            assert slave.store is not None
            before = commitlog(slave)
            await wait_until(lambda: slave.runtime_info()["replicationRefused"] != "", 10)
        assert "share no term" in slave.runtime_info()["replicationRefused"]
        assert any(r["event"] == "slave_refused" for r in logs)
        assert any(r["event"] == "replication_refused" for r in logs)
        assert commitlog(slave) == before and not master.runtime_info()["slaves"]


async def test_a_slave_ahead_of_its_master_in_the_same_term_truncates_to_it(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 2)
        slave = await add_slave(cluster, master, tmp_path)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(20):
                await p.send(Message("t", f"a-{i}".encode()))
            assert master.store is not None
            cut = master.store.commitlog.max_offset
            for i in range(20):
                await p.send(Message("t", f"b-{i}".encode()))
        await wait_until(lambda: caught_up(master, slave), 10)
        store_cfg = master.config.store
        await cluster.stop_broker(slave)
        await cluster.stop_broker(master)
        # The master loses its tail (as a master whose last writes never reached its disk).
        lost = MessageStore(store_cfg)
        lost.start()
        lost.truncate_to(cut)
        lost.shutdown()
        master = await cluster.add_broker(0)
        with capture_logs() as logs:
            slave = await add_slave(cluster, master, tmp_path)
            await wait_until(lambda: caught_up(master, slave) and slave.runtime_info()["masterConnected"], 10)
        assert any(r["event"] == "slave_truncated_to_master" for r in logs)
        assert commitlog(slave) == commitlog(master)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(10):
                await p.send(Message("t", f"c-{i}".encode()))
        await wait_until(lambda: caught_up(master, slave), 10)
        assert commitlog(slave) == commitlog(master)
        assert slave.store is not None and master.store is not None
        assert [slave.store.max_offset("t", q) for q in (0, 1)] == [master.store.max_offset("t", q) for q in (0, 1)]


async def test_slave_copies_topics_offsets_delay_offsets_and_groups(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 3)
        master.offsets.commit("g", "t", 1, 42)
        master.subscription_groups.upsert(SubscriptionGroupConfig("g", retryMaxTimes=5))
        master.schedule.offsets[3] = 7
        slave = await add_slave(cluster, master, tmp_path, slave_sync_interval_seconds=0.2)
        assert not slave.schedule._started  # a slave runs no schedule service

        def copied() -> bool:
            # One sync pass copies topics, offsets, delay offsets, then groups, with an await
            # between each: wait for the last of them, not only the first two.
            tc = slave.topics.get("t")
            g = slave.subscription_groups.groups.get("g")
            return (
                tc is not None
                and tc.readQueueNums == 3
                and slave.offsets.query("g", "t", 1) == 42
                and g is not None
                and g.retryMaxTimes == 5
            )

        await wait_until(copied, 10)
        await wait_until(lambda: (read_json(slave.schedule.path) or {}).get("offsetTable") == {"3": 7}, 10)
        # Changes on the master follow within an interval.
        master.offsets.commit("g", "t", 1, 50)
        master.topics.delete("t")
        await wait_until(lambda: slave.offsets.query("g", "t", 1) == 50 and slave.topics.get("t") is None, 10)


async def test_switchover_promotes_the_slave_and_the_old_master_follows_it(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 2)
        slave = await add_slave(cluster, master, tmp_path, slave_sync_interval_seconds=0.2)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(30):
                await p.send(Message("t", f"before-{i}".encode()))
            await wait_until(lambda: caught_up(master, slave) and slave.topics.get("t") is not None, 10)
            handlers_before = [dict(b.dispatcher._handlers) for b in (master, slave)]
            async with AdminClient(cluster.namesrv_addr) as admin:
                result = await promote_slave(admin, master.config.broker_name, slave.address)
                assert result["epoch"] == 2 and result["oldMasterNewId"] == 1 and result["behindBytes"] == 0
                members = await group_members(admin, master.config.broker_name)
            assert members == {0: slave.address, 1: master.address}
            assert (slave.role.current.broker_id, slave.role.current.name) == (0, "ASYNC_MASTER")
            assert (master.role.current.broker_id, master.role.current.name) == (1, "SLAVE")
            # a role change swaps no handler (nothing is built again, so nothing leaks)
            assert [dict(b.dispatcher._handlers) for b in (master, slave)] == handlers_before
            assert slave.replication is not None and master.replication is not None
            switched_at = slave.store.commitlog.max_offset if slave.store else 0
            assert [(e.epoch, e.start_offset) for e in slave.replication.epochs.entries] == [(1, 0), (2, switched_at)]
        # Writes go to the new master (a new producer: route changes are the client's business);
        # the old one refuses them and follows.
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(30):
                r = await p.send(Message("t", f"after-{i}".encode()))
                assert r.store_addr == slave.address
        await wait_until(lambda: caught_up(slave, master) and master.runtime_info()["masterConnected"], 10)
        assert commitlog(master) == commitlog(slave)
        assert master.runtime_info()["epochs"] == slave.runtime_info()["epochs"]
        assert [s["address"] for s in slave.runtime_info()["slaves"]] == [master.address]


async def test_other_slaves_follow_the_promoted_slave(tmp_path: Path) -> None:
    """A second slave, configured with the old master's address, follows the new master the
    nameserver names (at its next registration) and joins it without truncating anything."""
    async with LocalCluster(tmp_path / "c") as cluster:
        master = cluster.brokers[0]
        await cluster.create_topic("t", 2)
        s1 = await add_slave(cluster, master, tmp_path, "s1", slave_sync_interval_seconds=0.2)
        s2 = await add_slave(cluster, master, tmp_path, "s2", broker_id=2, register_interval_seconds=0.3)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(20):
                await p.send(Message("t", f"a-{i}".encode()))
        await wait_until(lambda: caught_up(master, s1) and caught_up(master, s2) and s1.topics.get("t") is not None)
        async with AdminClient(cluster.namesrv_addr) as admin:
            await promote_slave(admin, master.config.broker_name, s1.address)
            assert await group_members(admin, master.config.broker_name) == {
                0: s1.address,
                1: master.address,
                2: s2.address,
            }
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(20):
                await p.send(Message("t", f"b-{i}".encode()))
        s1_ha = s1.runtime_info()["haAddress"]
        await wait_until(lambda: s2.runtime_info()["masterHaAddress"] == s1_ha and caught_up(s1, s2), 15)
        assert commitlog(s2) == commitlog(s1)
        assert sorted(s["address"] for s in s1.runtime_info()["slaves"]) == sorted([master.address, s2.address])
