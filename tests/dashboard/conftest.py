"""Fixtures of the dashboard browser tests: one cluster of real daemons, one dashboard daemon and one
browser for the whole module (the tests run in file order and build on each other's data)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pymq.client.admin import AdminClient
from pymq.testing.processes import DaemonProcess, broker_process, namesrv_process
from tests.dashboard.browser import Browser, require_browser


def wait_for_broker(
    namesrv: str, timeout: float = 20.0, credentials: dict[str, str] | None = None, *, members: int = 1
) -> None:
    """Until a master (and ``members`` brokers in all) registered with the nameserver."""

    async def registered() -> bool:
        async with AdminClient(namesrv, **(credentials or {})) as admin:
            info = await admin.cluster_info()
            table = (info.get("brokerAddrTable") or {}).values()
            return bool(await admin.master_addrs()) and sum(len(b["brokerAddrs"]) for b in table) >= members

    deadline = time.monotonic() + timeout
    while not asyncio.run(registered()):
        if time.monotonic() > deadline:
            raise TimeoutError("the broker did not register with the nameserver")
        time.sleep(0.1)


@pytest.fixture(scope="package")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DaemonProcess]]:
    require_browser()
    work = tmp_path_factory.mktemp("dashboard-cluster")
    started: list[DaemonProcess] = []
    try:
        ns = namesrv_process(work)
        started.append(ns.start())
        broker = broker_process(work, ns.address, "broker-a")
        started.append(broker.start())
        # and its slave: the Cluster page shows the group's roles, epochs and replication lag
        slave_env = {"PYMQ_MASTER_ADDR": broker.address, "PYMQ_SLAVE_SYNC_INTERVAL_SECONDS": "0.3"}
        slave = broker_process(
            work / "slave",
            ns.address,
            "broker-a",
            "--broker-id",
            "1",
            "--role",
            "SLAVE",
            "--register-interval",
            "1",
            env=slave_env,
        )
        started.append(slave.start())
        wait_for_broker(ns.address, members=2)
        dash = DaemonProcess("dashboard", ["--namesrv", ns.address, "--port", "0", "--poll-interval", "1"], work)
        started.append(dash.start())
        yield {"namesrv": ns, "broker": broker, "dashboard": dash}
        assert dash.stop() == 0, dash.output()  # SIGTERM: a clean stop, exit 0
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture(scope="package")
def screens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dashboard-screens")


@pytest.fixture(scope="package")
def browser(
    daemons: dict[str, DaemonProcess], tmp_path_factory: pytest.TempPathFactory, screens: Path
) -> Iterator[Browser]:
    b = Browser(f"http://{daemons['dashboard'].address}", tmp_path_factory.mktemp("chromium-profile"), screens)
    try:
        yield b
    finally:
        b.close()
