"""The controller's state in a real etcd (issue 32): compare-on-revision transactions, the campaign
for the active controller (lease, txn, fenced saves), and a kill -9 failover with
``pymq-namesrv --controller etcd``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.controller.core import Controller, Heartbeat
from pymq.controller.etcd_campaign import CampaignResult, EtcdCampaign
from pymq.controller.etcd_store import EtcdGateway, EtcdStateStore, EtcdUnavailable, StateConflict
from pymq.testing import DaemonProcess, FakeClock, broker_process
from tests.controller_group import BROKER_ENV, CONTROLLER, create_topic, in_sync, master_is
from tests.etcd_server import etcd_server
from tests.helpers import wait_until_async

pytestmark = pytest.mark.integration


def test_etcd_store_round_trips_and_refuses_a_stale_writer(tmp_path: Path, free_ports) -> None:
    with etcd_server(tmp_path, free_ports) as url:
        a = EtcdStateStore([url], key="/t/state")
        b = EtcdStateStore(["http://127.0.0.1:1", url], key="/t/state")  # a dead endpoint first: skipped
        assert a.load() == {} and b.load() == {}
        ctl = Controller(FakeClock(), master_timeout=3.0)
        ctl.heartbeat(Heartbeat(group="g", address="127.0.0.1:1000", claims_master=True, epoch=3, max_offset=7))
        a.save(ctl.groups)
        with pytest.raises(StateConflict, match="changed since revision 0"):
            b.save(ctl.groups)  # b read before a wrote
        loaded = b.load()
        assert loaded["g"].to_dict() == ctl.groups["g"].to_dict()
        b.save(loaded)  # now current
        with pytest.raises(StateConflict):
            a.save(ctl.groups)
    with pytest.raises(EtcdUnavailable, match="no etcd endpoint"):
        EtcdStateStore([url], key="/t/state", timeout=0.5).load()


async def test_kill_9_master_with_the_controller_state_in_etcd(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    with etcd_server(tmp_path / "etcd", free_ports) as url:
        ns_proc = DaemonProcess(
            "namesrv",
            ["--host", "127.0.0.1", "--port", "0", *CONTROLLER[2:], "--controller", "etcd", "--controller-etcd", url],
            tmp_path,
        )
        processes.append(ns_proc.start())
        ns = ns_proc.address
        master = broker_process(tmp_path / "m", ns, "broker-a", "--role", "SYNC_MASTER", "--controller-mode",
                                  env=BROKER_ENV).start()  # fmt: skip
        processes.append(master)
        await create_topic(master.address)
        slave = broker_process(tmp_path / "s", ns, "broker-a", "--role", "SLAVE", "--broker-id", "1",
                                 "--controller-mode", env=BROKER_ENV).start()  # fmt: skip
        processes.append(slave)
        await wait_until_async(lambda: in_sync(ns, slave.address), timeout=15, what="slave in sync")
        master.kill()
        await wait_until_async(lambda: master_is(ns, slave.address), timeout=10, what="the slave elected")
        stored = EtcdStateStore([url]).load()["broker-a"]
        assert stored.master == slave.address and stored.epoch >= 2
        for p in processes:
            p.stop()  # before etcd goes


def test_the_campaign_in_a_real_etcd_one_wins_the_other_names_it_and_a_deposed_writer_is_fenced(
    tmp_path: Path, free_ports
) -> None:
    with etcd_server(tmp_path, free_ports) as url:
        gw_a, gw_b = EtcdGateway([url]), EtcdGateway([url])
        a = EtcdCampaign(gw_a, "/t/leader", "127.0.0.1:1", ttl=2)
        b = EtcdCampaign(gw_b, "/t/leader", "127.0.0.1:2", ttl=2)
        with pytest.raises(RuntimeError, match="no etcd lease"):
            a.campaign()  # never a key without a lease
        assert a.grant() >= 2 and b.grant() >= 2
        assert a.campaign() == CampaignResult(True, "127.0.0.1:1")
        assert b.campaign() == CampaignResult(False, "127.0.0.1:1")
        assert a.campaign() == CampaignResult(True, "127.0.0.1:1")  # still bound to a's lease
        assert a.keepalive() >= 1 and b.keepalive() >= 1

        store_a = EtcdStateStore([], key="/t/state", gateway=gw_a)
        store_a.load()
        store_a.fence = (a.key, a.lease)
        ctl = Controller(FakeClock(), master_timeout=3.0)
        ctl.heartbeat(Heartbeat(group="g", address="127.0.0.1:1000", claims_master=True, epoch=1, max_offset=0))
        store_a.save(ctl.groups)  # a holds the key: the fenced save goes through

        a_lease = a.lease
        a.resign()  # the key goes with the lease: b wins at once
        assert a.keepalive() == 0
        assert b.campaign() == CampaignResult(True, "127.0.0.1:2")
        a.lease = a_lease  # a deposed controller still believing in its lease
        with pytest.raises(StateConflict, match="lost its leadership"):
            store_a.save(ctl.groups)  # its revision is current, but the key is b's now
        store_b = EtcdStateStore([], key="/t/state", gateway=gw_b)
        assert store_b.load()["g"].master == "127.0.0.1:1000"
        store_b.fence = (b.key, b.lease)
        store_b.save(ctl.groups)
        b.resign()
        assert b.keepalive() == 0
