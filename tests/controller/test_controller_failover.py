"""Automatic failover by the embedded controller (issue 32), on real processes: a nameserver with
``--controller embedded``, a SYNC_MASTER and its slave in ``--controller-mode``. kill -9 the
master under a SYNC producer: the slave is elected, serves, and every acknowledged message is
readable from it. A second master of the same group is refused at startup with one line.

Short timeouts (heartbeat 0.2 s, lease 0.8 s, election after 1.2 s) keep the wall time small."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.cli.common import EXIT_CONFIG
from pymq.client import Message, Producer
from pymq.client.send_result import SendResult, SendStatus
from pymq.errors import PymqError
from pymq.protocol.codes import ResponseCode
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from tests.controller_group import (
    BROKER_ENV,
    CONTROLLER,
    TOPIC,
    controller_status,
    create_topic,
    in_sync,
    keep_sending,
    master_is,
    raw_send,
    read_everything,
    start_controlled_group,
)
from tests.helpers import wait_until, wait_until_async
from tests.master_slave import fast_client_options, group_addrs
from tests.metrics_helpers import scrape, value

pytestmark = pytest.mark.integration


async def test_kill_9_master_a_slave_is_elected_and_nothing_acknowledged_is_lost(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    (metrics_port,) = free_ports(1)
    ns = namesrv_process(
        tmp_path, *CONTROLLER, "--controller-dir", str(tmp_path / "ctl"), "--metrics-port", str(metrics_port)
    ).start()
    processes.append(ns)
    master = broker_process(tmp_path / "m", ns.address, "broker-a", "--role", "SYNC_MASTER", "--controller-mode",
                            env=BROKER_ENV).start()  # fmt: skip
    processes.append(master)
    await create_topic(master.address)
    slave = broker_process(tmp_path / "s", ns.address, "broker-a", "--role", "SLAVE", "--broker-id", "1",
                           "--controller-mode", env=BROKER_ENV).start()  # fmt: skip
    processes.append(slave)

    # A second master of the group, started while the master lives: refused, one line.
    second = broker_process(tmp_path / "x", ns.address, "broker-a", "--controller-mode", env=BROKER_ENV)
    with pytest.raises(RuntimeError, match=r"broker exited with 2") as refused:
        second.start()
    assert second.proc is not None and second.proc.returncode == EXIT_CONFIG
    errors = [ln for ln in second.output().splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, refused.value
    assert errors[0].startswith(f"error: broker group broker-a already has a live master at {master.address} (epoch ")
    assert errors[0].endswith("start this broker as a slave (--role SLAVE)")

    await wait_until_async(lambda: in_sync(ns.address, slave.address), timeout=15, what="slave in the sync-state set")
    await wait_until_async(
        lambda: _routed(ns.address, {0: master.address, 1: slave.address}), timeout=15, what="group routed"
    )
    before = (await controller_status(ns.address))["groups"]["broker-a"]
    assert before["master"] == master.address

    acked: set[bytes] = set()  # SEND_OK: stored on the master and its in-sync slave
    #: answered by the new master (alone in its sync-state set: SLAVE_NOT_AVAILABLE, but stored)
    stored_after: set[bytes] = set()
    failures = 0
    killed_at: float | None = None
    first_after_kill: float | None = None
    async with Producer(ns.address, "fp", **fast_client_options(interval=1.0, persist=1.0)) as producer:
        i = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(stored_after) < 100:
            body = f"m-{i}".encode()
            i += 1
            try:
                result = await producer.send(Message(TOPIC, body), timeout=2.0)
            except PymqError:
                failures += 1
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                acked.add(body)
            if killed_at is not None:
                assert result.store_addr == slave.address  # the killed master answers nothing
                stored_after.add(body)
                if first_after_kill is None:
                    first_after_kill = time.monotonic()
            elif len(acked) >= 150:
                master.kill()  # kill -9
                killed_at = time.monotonic()
    assert killed_at is not None and first_after_kill is not None, (failures, len(acked))
    failover = first_after_kill - killed_at
    after = (await controller_status(ns.address))["groups"]["broker-a"]
    assert after["master"] == slave.address and after["epoch"] > before["epoch"]
    assert await group_addrs(ns.address, TOPIC, "broker-a") == {0: slave.address}
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.admin", "--namesrv", ns.address, "controller-status"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    assert f"broker-a  {slave.address}  {after['epoch']}" in out, out
    assert f"broker-a {master.address} -> {slave.address} (master heartbeat lapsed)" in out, out
    _, samples = await scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    assert value(samples, "pymq_controller_elections_total", group="broker-a") == 2  # the first master, the failover
    assert value(samples, "pymq_controller_epoch", group="broker-a") == after["epoch"]
    assert value(samples, "pymq_controller_master_alive", group="broker-a") == 1
    assert value(samples, "pymq_controller_sync_state_set_size", group="broker-a") == len(after["syncSet"])
    got = await read_everything(ns.address, acked | stored_after)
    assert acked <= got, f"lost {len(acked - got)} acknowledged messages"
    assert stored_after <= got
    print(f"failover {failover:.2f}s: {len(acked)} acked, {len(stored_after)} stored after, {failures} failed sends")
    assert failover < 10


async def _routed(ns: str, addrs: dict[int, str]) -> bool:
    return await group_addrs(ns, TOPIC, "broker-a") == addrs


async def test_a_paused_master_acknowledges_nothing_after_its_lease_and_rejoins_as_a_slave(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns, master, slave = await start_controlled_group(tmp_path, processes)
    acked: set[bytes] = set()
    async with Producer(ns, "sp", **fast_client_options(interval=1.0, persist=1.0)) as producer:
        for i in range(50):
            result = await producer.send(Message(TOPIC, f"before-{i}".encode()))
            assert result.status is SendStatus.SEND_OK
            acked.add(f"before-{i}".encode())
        master.signal(signal.SIGSTOP)
        try:
            await wait_until_async(
                lambda: master_is(ns, slave.address), timeout=10, interval=0.1, what="the slave elected"
            )
            async with RpcClient() as rpc:
                # a write queued at the paused master: it is answered after SIGCONT, and refused
                queued = asyncio.ensure_future(rpc.invoke(master.address, raw_send(b"queued"), timeout=10.0))
                await asyncio.sleep(0.3)
                master.signal(signal.SIGCONT)
                answer = await queued
            assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, (answer.code, answer.remark)
        finally:
            master.signal(signal.SIGCONT)
        deadline = time.monotonic() + 15
        while len(acked) < 100 and time.monotonic() < deadline:
            try:
                result = await producer.send(Message(TOPIC, f"after-{len(acked)}".encode()), timeout=2.0)
            except PymqError:
                await asyncio.sleep(0.05)
                continue
            assert result.store_addr == slave.address
            acked.add(f"after-{len(acked)}".encode())
    # the old master rejoins as the new master's slave, back in its sync-state set
    await wait_until_async(lambda: in_sync(ns, master.address), timeout=15, what="old master back in sync")
    group = (await controller_status(ns))["groups"]["broker-a"]
    assert group["master"] == slave.address and group["replicas"][master.address]["brokerId"] > 0
    got = await read_everything(ns, acked)
    assert acked <= got, f"lost {len(acked - got)} acknowledged messages"
    assert b"queued" not in got


PAUSE_SECONDS = 30.0  # the pause: far past the 0.8 s lease and the 1.2 s election


async def test_eight_producers_through_a_30s_sigstop_nothing_acknowledged_by_the_paused_master(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    """8 SYNC producers keep sending while the master is paused for 30 s: every write queued at it
    during the pause is refused after SIGCONT (its lease lapsed), the producers carry on on the
    elected slave, the old master rejoins as a slave, and every acknowledged message is read."""
    ns, master, slave = await start_controlled_group(tmp_path, processes)
    acked: dict[bytes, str] = {}  # body -> the broker that answered SEND_OK
    #: answered by the new master: alone in its sync-state set until the old master rejoins, it
    #: stores SYNC sends and answers SLAVE_NOT_AVAILABLE (stored on one node), then SEND_OK
    on_new: set[bytes] = set()
    late_from_old: list[tuple[bytes, str]] = []  # answers of the old master received after SIGCONT
    phase = {"stopped_at": 0.0, "continued_at": 0.0}
    done = asyncio.Event()

    def on_result(body: bytes, result: SendResult) -> None:
        if result.store_addr == master.address and phase["continued_at"] and time.monotonic() > phase["continued_at"]:
            late_from_old.append((body, result.status.value))
        if result.status is SendStatus.SEND_OK:
            acked[body] = result.store_addr
        if result.store_addr == slave.address:
            on_new.add(body)

    async with Producer(ns, "stop8", **fast_client_options(interval=1.0, persist=1.0)) as producer:
        senders = [asyncio.ensure_future(keep_sending(producer, f"p{p}", done, on_result)) for p in range(8)]
        try:
            await wait_until(lambda: len(acked) >= 200, timeout=20, what="200 acknowledged sends")
            phase["stopped_at"] = time.monotonic()
            master.signal(signal.SIGSTOP)
            try:
                await wait_until_async(
                    lambda: master_is(ns, slave.address), timeout=10, interval=0.1, what="the slave elected"
                )
                at_election = len(on_new)
                await asyncio.sleep(max(0.0, phase["stopped_at"] + PAUSE_SECONDS - time.monotonic()))
                during = len(on_new) - at_election
            finally:
                phase["continued_at"] = time.monotonic()
                master.signal(signal.SIGCONT)
            await wait_until_async(lambda: in_sync(ns, master.address), timeout=20, what="old master back in sync")
            await asyncio.sleep(1.0)  # the producers go on a little with the old master as a slave
        finally:
            done.set()
            await asyncio.gather(*senders)
    assert during > 0, "the producers did not carry on on the elected slave during the pause"
    # Anything the old master answered after SIGCONT was queued there during the pause: refused.
    assert not [b for b, status in late_from_old if status == SendStatus.SEND_OK.value], late_from_old[:5]
    group = (await controller_status(ns))["groups"]["broker-a"]
    assert group["master"] == slave.address and group["replicas"][master.address]["brokerId"] > 0
    got = await read_everything(ns, set(acked) | on_new, timeout=30)
    missing = set(acked) - got
    assert not missing, f"lost {len(missing)} of {len(acked)} acknowledged messages, e.g. {sorted(missing)[:3]}"
    assert on_new <= got, f"{len(on_new - got)} messages stored by the new master not read"
    print(f"sigstop {PAUSE_SECONDS:.0f}s: {len(acked)} acked, {during} stored by the new master during the pause")


async def test_elect_master_moves_the_mastership_and_the_old_master_follows(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns, master, slave = await start_controlled_group(tmp_path, processes)
    async with Producer(ns, "ep", **fast_client_options(interval=1.0, persist=1.0)) as producer:
        for i in range(20):
            assert (await producer.send(Message(TOPIC, f"e-{i}".encode()))).status is SendStatus.SEND_OK
        admin = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", ns, "elect-master", "--broker-name", "broker-a"]
        wrong = subprocess.run([*admin, "--broker-addr", "127.0.0.1:1"], capture_output=True, text=True, timeout=30)
        assert wrong.returncode == 1 and "127.0.0.1:1 is not in broker-a's sync-state set" in wrong.stderr
        out = subprocess.run(admin, capture_output=True, text=True, timeout=30, check=True).stdout
        assert out.startswith(f"broker-a: master {slave.address} at epoch ")
        async with RpcClient() as rpc:
            refused = await rpc.invoke(master.address, raw_send(b"to-old"), timeout=5.0)
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
        deadline = time.monotonic() + 15
        sent_after = 0
        while sent_after < 20 and time.monotonic() < deadline:
            try:
                result = await producer.send(Message(TOPIC, f"e-after-{sent_after}".encode()), timeout=2.0)
            except PymqError:
                await asyncio.sleep(0.05)
                continue
            assert result.store_addr == slave.address
            sent_after += 1
        assert sent_after == 20
    await wait_until_async(lambda: in_sync(ns, master.address), timeout=15, what="old master in sync under the new")
    want = {f"e-{i}".encode() for i in range(20)} | {f"e-after-{i}".encode() for i in range(20)}
    assert want <= await read_everything(ns, want)


async def test_a_restarted_controller_keeps_its_state_and_the_next_failover_works(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    """kill -9 the controller's nameserver: the master's lease lapses and it stops taking writes;
    restarted on its state file, the controller renews the lease (the master is unfenced), and a
    kill -9 of the master afterwards still elects the slave."""
    (port,) = free_ports(1)
    args = [*CONTROLLER, "--controller-dir", str(tmp_path / "ctl"), "--port", str(port)]
    ns_proc = DaemonProcess("namesrv", ["--host", "127.0.0.1", *args], tmp_path)
    processes.append(ns_proc.start())
    ns = ns_proc.address
    master = broker_process(tmp_path / "m", ns, "broker-a", "--role", "SYNC_MASTER", "--controller-mode",
                            env=BROKER_ENV).start()  # fmt: skip
    processes.append(master)
    await create_topic(master.address)
    slave = broker_process(tmp_path / "s", ns, "broker-a", "--role", "SLAVE", "--broker-id", "1",
                           "--controller-mode", env=BROKER_ENV).start()  # fmt: skip
    processes.append(slave)
    await wait_until_async(lambda: in_sync(ns, slave.address), timeout=15, what="slave in the sync-state set")
    epoch = (await controller_status(ns))["groups"]["broker-a"]["epoch"]

    ns_proc.kill()
    await asyncio.sleep(1.5)  # past the 0.8 s lease
    async with RpcClient() as rpc:
        refused = await rpc.invoke(master.address, raw_send(b"no-lease"), timeout=5.0)
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    ns_proc = DaemonProcess("namesrv", ["--host", "127.0.0.1", *args], tmp_path)
    processes.append(ns_proc.start())
    group = (await controller_status(ns))["groups"]["broker-a"]
    assert (group["master"], group["epoch"]) == (master.address, epoch)  # from the state file

    async def takes_writes() -> bool:
        async with RpcClient() as rpc:
            return (await rpc.invoke(master.address, raw_send(b"leased"), timeout=5.0)).code == ResponseCode.SUCCESS

    await wait_until_async(takes_writes, timeout=10, what="the master unfenced")
    await wait_until_async(lambda: in_sync(ns, slave.address), timeout=15, what="slave reported in sync again")
    master.kill()
    await wait_until_async(lambda: master_is(ns, slave.address), timeout=10, what="the slave elected")
    assert (await controller_status(ns))["groups"]["broker-a"]["epoch"] > epoch
