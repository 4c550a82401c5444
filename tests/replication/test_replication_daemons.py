"""Replication on real daemon processes: SYNC_MASTER acknowledgements survive kill -9 of the
master, a restarted slave resumes from its own offset, an ASYNC_MASTER slave's lag stays bounded.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.store import MessageStore
from pymq.client import Message, Producer
from pymq.client.broker_api import view_message
from pymq.client.producer import SendStatus
from pymq.config import SMALL_STORE_SIZES, StoreConfig
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.record import parse_record
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from tests.daemon_helpers import create_topic, wait_for_route

pytestmark = pytest.mark.integration


def start_pair(
    tmp_path: Path, processes: list[DaemonProcess], role: str
) -> tuple[DaemonProcess, DaemonProcess, DaemonProcess]:
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    master = broker_process(tmp_path / "m", ns.address, "broker-a", "--role", role).start()
    processes.append(master)
    slave = start_slave(tmp_path, ns, master)
    processes.append(slave)
    asyncio.run(create_topic([master], "t", 4))
    asyncio.run(wait_for_route(ns.address, "t", 1))
    return ns, master, slave


def start_slave(tmp_path: Path, ns: DaemonProcess, master: DaemonProcess) -> DaemonProcess:
    env = {
        "PYMQ_MASTER_ADDR": master.address,
        "PYMQ_SLAVE_READ_ENABLE": "true",
        "PYMQ_SLAVE_SYNC_INTERVAL_SECONDS": "0.3",
    }
    return broker_process(
        tmp_path / "s", ns.address, "broker-a", "--broker-id", "1", "--role", "SLAVE", env=env
    ).start()


async def wait_topic_copied(rpc: RpcClient, slave: DaemonProcess, topic: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        resp = await rpc.invoke_ok(slave.address, Command.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        if topic in decode_body(resp.body)["topicConfigTable"]:
            return
        assert time.monotonic() < deadline, f"{topic} not copied to the slave"
        await asyncio.sleep(0.05)


def open_store(root: Path) -> MessageStore:
    store = MessageStore(StoreConfig(store_dir=root, **SMALL_STORE_SIZES))
    store.start()
    return store


async def runtime_info(rpc: RpcClient, addr: str) -> dict[str, Any]:
    resp = await rpc.invoke_ok(addr, Command.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=5.0)
    info: dict[str, Any] = decode_body(resp.body)
    return info


async def wait_in_sync(rpc: RpcClient, master: DaemonProcess, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (await runtime_info(rpc, master.address)).get("inSyncSlaves") != 1:
        assert time.monotonic() < deadline, "the slave did not join within the timeout"
        await asyncio.sleep(0.05)


async def wait_caught_up(rpc: RpcClient, master: DaemonProcess, slave: DaemonProcess, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        m = (await runtime_info(rpc, master.address))["commitLogMaxOffset"]
        s = (await runtime_info(rpc, slave.address))["commitLogMaxOffset"]
        if m == s:
            return int(m)
        assert time.monotonic() < deadline, f"slave at {s}, master at {m}"
        await asyncio.sleep(0.05)


def test_sync_master_send_ok_means_the_slave_holds_the_bytes(tmp_path: Path, processes: list[DaemonProcess]) -> None:
    ns, master, slave = start_pair(tmp_path, processes, "SYNC_MASTER")

    async def run() -> None:
        async with RpcClient() as rpc, Producer(ns.address, retry_times=0) as p:
            await wait_in_sync(rpc, master)
            for i in range(25):
                r = await p.send(Message("t", f"sync-{i}-".encode() * (1 + i * 20), keys=[f"k{i}"]))
                assert r.status == SendStatus.SEND_OK
                phys = r.commit_log_offsets[0]
                # Asked right after SEND_OK: the slave answers with the master's exact bytes.
                on_slave = await rpc.invoke_ok(slave.address, view_message(phys))
                on_master = await rpc.invoke_ok(master.address, view_message(phys))
                assert bytes(on_slave.body) == bytes(on_master.body)

    asyncio.run(run())


def test_sigkill_master_under_sync_load_loses_no_acknowledged_message(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns, master, slave = start_pair(tmp_path, processes, "SYNC_MASTER")
    acked: dict[int, bytes] = {}

    async def run() -> None:
        async with RpcClient() as rpc:
            await wait_in_sync(rpc, master)
        stop = asyncio.Event()

        async def producer(n: int) -> None:
            async with Producer(ns.address, f"p{n}", retry_times=0, send_timeout=3.0) as p:
                i = 0
                while not stop.is_set():
                    body = f"p{n}-{i}-".encode() * 30
                    i += 1
                    try:
                        r = await p.send(Message("t", body))
                    except PymqError:
                        await asyncio.sleep(0.05)
                        continue
                    if r.status == SendStatus.SEND_OK:
                        acked[r.commit_log_offsets[0]] = body

        tasks = [asyncio.create_task(producer(n)) for n in range(4)]
        deadline = time.monotonic() + 30
        while len(acked) < 400:
            assert time.monotonic() < deadline, f"only {len(acked)} sends acknowledged"
            await asyncio.sleep(0.02)
        master.kill()  # SIGKILL, mid-load
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert slave.stop() == 0
    store = open_store(tmp_path / "s" / "broker-a")
    try:
        missing = []
        for phys, body in acked.items():
            rec = store.read_record(phys)
            if rec is None or parse_record(rec).body != body:
                missing.append(phys)
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages missing on the slave"
    finally:
        store.shutdown()


def test_slave_killed_mid_stream_resumes_from_its_own_offset(tmp_path: Path, processes: list[DaemonProcess]) -> None:
    ns, master, slave = start_pair(tmp_path, processes, "ASYNC_MASTER")

    async def load(seconds: float, stop_at: float | None = None) -> None:
        async with Producer(ns.address, "p") as p:
            end = time.monotonic() + seconds
            i = 0
            while time.monotonic() < end:
                await p.send(Message("t", f"m-{i}-".encode() * 40))
                i += 1

    async def run() -> int:
        async with RpcClient() as rpc:
            await wait_in_sync(rpc, master)
            await load(1.0)
            slave.kill()  # mid-stream
            await load(1.0)  # the master goes on alone
            return int((await runtime_info(rpc, master.address))["commitLogMaxOffset"])

    master_end = asyncio.run(run())
    restarted = start_slave(tmp_path, ns, master)
    processes.append(restarted)

    async def finish() -> None:
        async with RpcClient() as rpc:
            await load(0.5)
            await wait_caught_up(rpc, master, restarted)

    asyncio.run(finish())
    events = [json.loads(ln) for ln in restarted.output().splitlines() if ln.startswith("{")]
    joined = [e for e in events if e["event"] == "replicating"]
    assert joined, restarted.output()
    # It continued from what it held (an offset past 0, below where the master had got to).
    assert joined[0]["action"] == "stream" and 0 < joined[0]["offset"] < master_end, joined[0]
    assert restarted.stop() == 0 and master.stop() == 0
    a = open_store(tmp_path / "m" / "broker-a")
    b = open_store(tmp_path / "s" / "broker-a")
    try:
        top = a.commitlog.max_offset
        assert b.commitlog.max_offset == top
        assert b"".join(bytes(v) for v in b.read_commitlog(0, top)) == b"".join(
            bytes(v) for v in a.read_commitlog(0, top)
        )
    finally:
        a.shutdown()
        b.shutdown()


def test_async_master_keeps_slave_lag_bounded_under_load(tmp_path: Path, processes: list[DaemonProcess]) -> None:
    ns, master, slave = start_pair(tmp_path, processes, "ASYNC_MASTER")
    lags: list[int] = []

    async def run() -> int:
        async with RpcClient() as rpc:
            await wait_in_sync(rpc, master)
            stop = asyncio.Event()

            async def producer(n: int) -> None:
                async with Producer(ns.address, f"p{n}") as p:
                    i = 0
                    while not stop.is_set():
                        await p.send(Message("t", f"p{n}-{i}".encode() * 100))
                        i += 1

            tasks = [asyncio.create_task(producer(n)) for n in range(4)]
            end = time.monotonic() + 3.0
            while time.monotonic() < end:
                info = await runtime_info(rpc, master.address)
                lags.append(int(info["replicationLagBytes"]))
                await asyncio.sleep(0.1)
            stop.set()
            await asyncio.gather(*tasks)
            return await wait_caught_up(rpc, master, slave)

    top = asyncio.run(run())
    print(f"\nASYNC_MASTER lag under load: max {max(lags)} bytes, samples {len(lags)}, data {top} bytes")
    assert top > 1_000_000
    assert max(lags) < 16 * 1024 * 1024


def events(proc: DaemonProcess) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in proc.output().splitlines() if ln.startswith("{")]


def test_promote_slave_then_restarted_old_master_rejoins_and_truncates_its_tail(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    """SYNC_MASTER: the slave dies, the master stores a tail no slave acknowledged, then dies too;
    the slave comes back and is promoted (pymq-admin broker-role: refused without --force, as
    nothing proves it holds everything), the old master restarts: it finds a newer term, joins
    as a slave, drops the tail; every acknowledged message survives."""
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    env = {"PYMQ_SLAVE_ACK_TIMEOUT_MS": "500"}
    master_args = ("--role", "SYNC_MASTER")
    master = broker_process(tmp_path / "m", ns.address, "broker-a", *master_args, env=env).start()
    processes.append(master)
    slave = start_slave(tmp_path, ns, master)
    processes.append(slave)
    asyncio.run(create_topic([master], "t", 2))
    asyncio.run(wait_for_route(ns.address, "t", 1))
    acked: dict[int, bytes] = {}

    async def produce() -> int:
        async with RpcClient() as rpc, Producer(ns.address, retry_times=0) as p:
            await wait_in_sync(rpc, master)
            await wait_topic_copied(rpc, slave, "t")
            for i in range(40):
                body = f"acked-{i}".encode() * 10
                r = await p.send(Message("t", body))
                assert r.status == SendStatus.SEND_OK
                acked[r.commit_log_offsets[0]] = body
            slave.kill()  # the slave dies: what follows stays on the master alone
            for i in range(3):
                r = await p.send(Message("t", f"tail-{i}".encode()))
                assert r.status in (SendStatus.SLAVE_NOT_AVAILABLE, SendStatus.FLUSH_SLAVE_TIMEOUT)
            end = int((await runtime_info(rpc, master.address))["commitLogMaxOffset"])
            master.kill()
            return end

    old_end = asyncio.run(produce())
    slave = start_slave(tmp_path, ns, master)  # back, with what it had; its master is gone
    processes.append(slave)
    refused = run_admin_fails(ns, "broker-role", "--broker-name", "broker-a", "--promote", slave.address)
    assert "--force" in refused
    promoted = run_admin(ns, "broker-role", "--broker-name", "broker-a", "--promote", slave.address, "--force")
    assert promoted["newMaster"] == slave.address and promoted["epoch"] == 2, promoted

    # The old master restarts with its old configuration (master, id 0).
    again = broker_process(tmp_path / "m", ns.address, "broker-a", *master_args, env=env).start()
    processes.append(again)

    async def check() -> int:
        async with RpcClient() as rpc:
            deadline = time.monotonic() + 30
            while True:
                info = await runtime_info(rpc, again.address)
                if info.get("masterConnected"):
                    break
                assert time.monotonic() < deadline, info
                await asyncio.sleep(0.05)
            assert info["role"] == "SLAVE" and info["brokerId"] == 1
            async with Producer(ns.address, retry_times=0) as p:
                for i in range(10):
                    r = await p.send(Message("t", f"after-{i}".encode()))
                    assert r.store_addr == slave.address
            return await wait_caught_up(rpc, slave, again)

    end = asyncio.run(check())
    evs = events(again)
    assert any(e["event"] == "fenced_by_newer_master" for e in evs)
    cut = [e for e in evs if e["event"] == "slave_truncated_to_master"]
    assert cut and cut[0]["dropped_bytes"] > 0 and cut[0]["offset"] < old_end, cut
    assert again.stop() == 0 and slave.stop() == 0
    new_master = open_store(tmp_path / "s" / "broker-a")
    old_master = open_store(tmp_path / "m" / "broker-a")
    try:
        assert new_master.commitlog.max_offset == old_master.commitlog.max_offset == end
        assert b"".join(bytes(v) for v in old_master.read_commitlog(0, end)) == b"".join(
            bytes(v) for v in new_master.read_commitlog(0, end)
        )
        for phys, body in acked.items():
            rec = new_master.read_record(phys)
            assert rec is not None and parse_record(rec).body == body
    finally:
        new_master.shutdown()
        old_master.shutdown()


def run_admin(ns: DaemonProcess, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.admin", "--namesrv", ns.address, "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def run_admin_fails(ns: DaemonProcess, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.admin", "--namesrv", ns.address, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0, out.stdout
    return out.stderr
