"""Several controllers on one etcd, one active (issue 32), on real processes: nameservers with
``--controller etcd``, a SYNC_MASTER and its slave in ``--controller-mode`` listing all of them.

* kill -9 the ACTIVE controller's nameserver: a standby takes over (its status says active, the
  others' say standby and name it), the master keeps serving, and a kill -9 of the master
  afterwards still elects the slave; no acknowledged message is lost;
* a three-member etcd cluster loses its raft leader (kill -9): the controllers carry on, and a
  master failover still works.

Short timeouts (etcd lease 2 s, heartbeat 0.2 s, master lease 0.8 s, election after 1.2 s, a
fast raft) keep the wall time small."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.client.send_result import SendStatus
from pymq.controller.etcd_store import EtcdStateStore
from pymq.errors import PymqError
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.controller_group import (
    BROKER_ENV,
    CONTROLLER,
    TOPIC,
    controller_status,
    create_topic,
    in_sync,
    master_is,
    read_everything,
)
from tests.etcd_server import etcd_cluster, etcd_server
from tests.helpers import wait_until_async
from tests.master_slave import fast_client_options
from tests.metrics_helpers import scrape, value

pytestmark = pytest.mark.integration

ETCD_LEASE = "2"


def etcd_controller(workdir: Path, endpoints: list[str], metrics_port: int | None = None) -> DaemonProcess:
    args = [*CONTROLLER[2:], "--controller", "etcd", "--controller-etcd", ";".join(endpoints),
            "--controller-etcd-lease", ETCD_LEASE]  # fmt: skip
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    return namesrv_process(workdir, *args)


async def roles(addrs: list[str]) -> dict[str, tuple[str, str | None]]:
    """Each reachable controller's (role, the active controller it names)."""
    out = {}
    for a in addrs:
        try:
            st = await controller_status(a)
        except (PymqError, OSError):
            continue
        out[a] = (st["role"], st.get("activeController"))
    return out


async def the_active(addrs: list[str], timeout: float = 15.0) -> str:
    """Waits until exactly one of ``addrs`` is active and every other names it; returns it."""
    found: list[str] = []

    async def one_active() -> bool:
        seen = await roles(addrs)
        active = [a for a, (role, _) in seen.items() if role == "active"]
        found[:] = active
        return len(active) == 1 and all(named == active[0] for a, (_, named) in seen.items())

    await wait_until_async(one_active, timeout=timeout, interval=0.1, what=f"one active controller among {addrs}")
    return found[0]


async def send(producer: Producer, prefix: str, n: int, *, timeout: float = 20.0) -> tuple[set[bytes], set[str]]:
    """``n`` messages answered (retrying failures); returns the SEND_OK bodies and the store addresses."""
    acked: set[bytes] = set()
    addrs: set[str] = set()
    answered = 0
    deadline = time.monotonic() + timeout
    while answered < n and time.monotonic() < deadline:
        body = f"{prefix}-{answered}".encode()
        try:
            result = await producer.send(Message(TOPIC, body), timeout=2.0)
        except PymqError:
            await asyncio.sleep(0.05)
            continue
        answered += 1
        addrs.add(result.store_addr)
        if result.status is SendStatus.SEND_OK:
            acked.add(body)
    assert answered == n, f"only {answered} of {n} {prefix} sends answered"
    return acked, addrs


async def start_group(
    tmp_path: Path, ns: str, active: str, processes: list[DaemonProcess]
) -> tuple[DaemonProcess, DaemonProcess]:
    master = broker_process(tmp_path / "m", ns, "broker-a", "--role", "SYNC_MASTER", "--controller-mode",
                            env=BROKER_ENV).start()  # fmt: skip
    processes.append(master)
    await create_topic(master.address)
    slave = broker_process(tmp_path / "s", ns, "broker-a", "--role", "SLAVE", "--broker-id", "1",
                           "--controller-mode", env=BROKER_ENV).start()  # fmt: skip
    processes.append(slave)
    await wait_until_async(lambda: in_sync(active, slave.address), timeout=15, what="slave in the sync-state set")
    return master, slave


async def both_heard(active: str, *brokers: str) -> bool:
    group = (await controller_status(active))["groups"].get("broker-a") or {}
    return set(brokers) <= set(group.get("alive", []))


async def active_says(addrs: list[str], *alive: str, in_sync: str = "", master: str = "") -> bool:
    """The active controller of ``addrs`` (whichever it is now) hears ``alive``, holds ``in_sync`` in
    the sync-state set, has ``master`` as the master."""
    try:
        group = (await controller_status(await the_active(addrs, timeout=3.0)))["groups"].get("broker-a") or {}
    except (AssertionError, TimeoutError, PymqError, OSError):
        return False
    return (
        set(alive) <= set(group.get("alive", []))
        and (not in_sync or in_sync in group.get("syncSet", []))
        and (not master or group.get("master") == master)
    )


def admin(ns: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "pymq.cli.admin", "--namesrv", ns, *args],
                          capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip


async def test_kill_9_the_active_controller_a_standby_takes_over_and_the_next_failover_works(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    started = time.monotonic()
    with etcd_server(tmp_path / "etcd", free_ports) as url:
        metrics = free_ports(3)
        nss = [etcd_controller(tmp_path / f"ns{i}", [url], metrics[i]).start() for i in range(3)]
        processes.extend(nss)
        addrs = [p.address for p in nss]
        ns_all = ";".join(addrs)
        active = await the_active(addrs)
        master, slave = await start_group(tmp_path, ns_all, active, processes)
        standby = next(a for a in addrs if a != active)
        out = admin(standby, "controller-status")
        assert out.startswith(f"controller {standby}: standby (active controller: {active})"), out
        assert f"controller {active}: active" in admin(ns_all, "controller-status")
        # elect-master given only the standby: it follows the controller the standby names
        elect = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", standby, "elect-master",
                 "--broker-name", "broker-a", "--broker-addr", "127.0.0.1:1"]  # fmt: skip
        wrong = subprocess.run(elect, capture_output=True, text=True, timeout=30)
        assert wrong.returncode == 1 and "127.0.0.1:1 is not in broker-a's sync-state set" in wrong.stderr, wrong
        epoch = (await controller_status(active))["groups"]["broker-a"]["epoch"]

        async with Producer(ns_all, "sp", **fast_client_options(interval=1.0, persist=1.0)) as producer:
            acked, stores = await send(producer, "before", 50)
            assert len(acked) == 50 and stores == {master.address}

            nss[addrs.index(active)].kill()  # kill -9 the active controller's nameserver
            killed_at = time.monotonic()
            rest = [a for a in addrs if a != active]
            new_active = await the_active(rest)
            takeover = time.monotonic() - killed_at
            status = await controller_status(new_active)
            group = status["groups"]["broker-a"]
            assert (group["master"], group["epoch"]) == (master.address, epoch)  # loaded from etcd, no election
            other = next(a for a in rest if a != new_active)
            for addr, want in ((new_active, 1), (other, 0)):
                _, samples = await scrape(f"http://127.0.0.1:{metrics[addrs.index(addr)]}/metrics")
                assert value(samples, "pymq_controller_active") == want
            out = admin(other, "controller-status")
            assert out.startswith(f"controller {other}: standby (active controller: {new_active})"), out
            await wait_until_async(lambda: both_heard(new_active, master.address, slave.address), timeout=10,
                                   what="both brokers heartbeating to the new active controller")  # fmt: skip
            more, stores = await send(producer, "between", 50)
            assert stores == {master.address}
            acked |= more
            await wait_until_async(lambda: in_sync(new_active, slave.address), timeout=15, what="slave in sync")

            master.kill()  # kill -9 the master: the new active controller elects the slave
            await wait_until_async(lambda: master_is(new_active, slave.address), timeout=10, what="slave elected")
            after, stores = await send(producer, "after", 30)
            assert stores == {slave.address}
            acked |= after
        group = (await controller_status(new_active))["groups"]["broker-a"]
        assert group["master"] == slave.address and group["epoch"] > epoch
        stored = EtcdStateStore([url]).load()["broker-a"]
        assert (stored.master, stored.epoch) == (slave.address, group["epoch"])
        got = await read_everything(new_active, acked)
        assert acked <= got, f"lost {len(acked - got)} acknowledged messages"
        for p in processes:
            p.stop()  # before etcd goes
    print(f"takeover {takeover:.2f}s after the kill; test wall time {time.monotonic() - started:.1f}s")


async def test_a_three_member_etcd_loses_its_leader_and_the_controllers_carry_on(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    started = time.monotonic()
    with etcd_cluster(tmp_path / "etcd", free_ports, members=3) as etcd:
        nss = [etcd_controller(tmp_path / f"ns{i}", etcd.urls).start() for i in range(2)]
        processes.extend(nss)
        addrs = [p.address for p in nss]
        ns_all = ";".join(addrs)
        active = await the_active(addrs)
        master, slave = await start_group(tmp_path, ns_all, active, processes)
        async with Producer(ns_all, "ep", **fast_client_options(interval=1.0, persist=1.0)) as producer:
            acked, _ = await send(producer, "before", 30)
            leader = etcd.leader()
            assert leader >= 0
            etcd.kill(leader)  # kill -9 the raft leader: the other two elect a new one
            live = [u for i, u in enumerate(etcd.urls) if i != leader]

            async def new_raft_leader() -> bool:
                return await asyncio.to_thread(etcd.leader) not in (-1, leader)

            await wait_until_async(new_raft_leader, timeout=10, what="a new etcd leader")
            more, stores = await send(producer, "between", 30)
            acked |= more
            assert stores == {master.address}
            # one controller is active (the same one, unless etcd's election outlasted its lease and a
            # standby took over): it hears both brokers and holds the slave in sync
            heard = "the active controller hearing both, the slave in sync"
            await wait_until_async(lambda: active_says(addrs, master.address, slave.address, in_sync=slave.address),
                                   timeout=15, what=heard)  # fmt: skip
            epoch = (await controller_status(await the_active(addrs)))["groups"]["broker-a"]["epoch"]

            master.kill()
            await wait_until_async(lambda: active_says(addrs, slave.address, master=slave.address), timeout=10,
                                   what="the slave elected")  # fmt: skip
            after, stores = await send(producer, "after", 30)
            assert stores == {slave.address}
            acked |= after
        stored = EtcdStateStore(live).load()["broker-a"]
        assert stored.master == slave.address and stored.epoch > epoch
        got = await read_everything(await the_active(addrs), acked)
        assert acked <= got, f"lost {len(acked - got)} acknowledged messages"
        for p in processes:
            p.stop()
    print(f"test wall time {time.monotonic() - started:.1f}s")
