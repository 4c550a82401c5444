"""deploy/: example configs load, units are hardened, the launcher runs and stops the example cluster."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pymq.client.namesrv import NamesrvClient
from pymq.config import BrokerConfig, DashboardConfig, NamesrvConfig, ProxyConfig, load_config
from pymq.transport.client import RpcClient
from tests.helpers import wait_until_sync

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LAUNCHER = DEPLOY / "local_cluster.py"


def model_for(path: Path) -> type[NamesrvConfig] | type[BrokerConfig] | type[ProxyConfig] | type[DashboardConfig]:
    if path.stem.startswith("namesrv"):
        return NamesrvConfig
    if path.stem.startswith("proxy"):
        return ProxyConfig
    if path.stem == "dashboard":
        return DashboardConfig
    assert path.stem.startswith("broker"), f"{path}: name it namesrv-*, broker-*, proxy-*.toml or dashboard.toml"
    return BrokerConfig


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


class Launched:
    """The launcher as a child process, with the status it writes once the cluster serves."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.dir = tmp_path / "run"
        self.status_path = tmp_path / "status.json"
        self.out_path = tmp_path / "launcher.out"
        cmd = [
            sys.executable,
            str(LAUNCHER),
            "--ephemeral",
            "--dir",
            str(self.dir),
            "--status-file",
            str(self.status_path),
            *extra,
        ]
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.status: dict[str, Any] = {}
        wait_until_sync(lambda: self.status_path.exists() or self.proc.poll() is not None, timeout=90, what="launcher")
        assert self.status_path.exists(), f"launcher exited {self.proc.returncode}:\n{self.output()}"
        self.status = json.loads(self.status_path.read_text())

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def daemon(self, name: str) -> dict[str, Any]:
        return next(d for d in self.status["daemons"] if d["name"] == name)

    @property
    def pids(self) -> list[int]:
        return [d["pid"] for d in self.status.get("daemons", [])]

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def cleanup(self) -> None:
        """Whatever happened, leave nothing running (by PID)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pid in self.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """Start the launcher (free ports); every launcher and daemon is gone afterwards."""
    started: list[Launched] = []

    def start(*extra: str) -> Launched:
        started.append(Launched(tmp_path, *extra))
        return started[-1]

    yield start
    for launched in started:
        launched.cleanup()


async def cluster_info(addr: str) -> dict[str, Any]:
    async with RpcClient() as rpc:
        return await NamesrvClient(rpc, [addr]).cluster_info()


def test_every_deploy_toml_loads_and_forms_the_example_cluster() -> None:
    """Each TOML file under deploy/ loads with load_config; together: 2 nameservers, 2 broker groups, a
    gRPC front end and the web dashboard pointed at both nameservers."""
    paths = sorted(DEPLOY.rglob("*.toml"))
    configs = {p.stem: load_config(model_for(p), p, env={}) for p in paths}
    namesrvs = [c for c in configs.values() if isinstance(c, NamesrvConfig)]
    brokers = [c for c in configs.values() if isinstance(c, BrokerConfig)]
    assert len(namesrvs) == 2 and len(brokers) == 2
    assert {b.broker_name for b in brokers} == {"broker-a", "broker-b"}
    assert all(b.broker_id == 0 for b in brokers)
    proxies = [c for c in configs.values() if isinstance(c, ProxyConfig)]
    dashboards = [c for c in configs.values() if isinstance(c, DashboardConfig)]
    assert len(proxies) == 1 and len(dashboards) == 1 and len(configs) == 6
    # no TLS of its own: on loopback (behind a reverse proxy), never a mutation-capable default on 0.0.0.0
    assert dashboards[0].host == "127.0.0.1" and dashboards[0].session_secret is None
    daemons = [*namesrvs, *brokers]
    ports = [c.port for c in configs.values()] + [c.metrics_port for c in daemons]
    assert None not in ports and len(set(ports)) == len(ports), "ports must differ to run on one host"
    for proxy in [*proxies, *dashboards]:
        assert sorted(int(a.rpartition(":")[2]) for a in proxy.namesrv_addrs) == sorted(n.port for n in namesrvs)
    for b in brokers:
        assert sorted(int(a.rpartition(":")[2]) for a in b.namesrv_addrs) == sorted(n.port for n in namesrvs)
        assert str(b.store.store_dir) == f"/var/lib/pymq/{b.broker_name}", "the unit's ReadWritePaths"


def read_unit(path: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():  # systemd allows repeated keys; configparser does not
        key, sep, value = line.partition("=")
        if sep and not line.startswith(("#", "[")):
            values.setdefault(key.strip(), []).append(value.strip())
    return values


@pytest.mark.parametrize(
    "unit", ["pymq-namesrv@.service", "pymq-broker@.service", "pymq-proxy@.service", "pymq-dashboard.service"]
)
def test_systemd_units_are_hardened(unit: str, tmp_path: Path) -> None:
    """Each unit runs as pymq with the hardening options, restarts on failure, stops with SIGTERM."""
    path = DEPLOY / "systemd" / unit
    v = read_unit(path)
    expected = {
        "User": "pymq",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "Restart": "on-failure",
        "KillSignal": "SIGTERM",
    }
    for key, value in expected.items():
        assert v.get(key) == [value], key
    assert int(v["LimitNOFILE"][0]) >= 65536 and int(v["TimeoutStopSec"][0]) >= 30
    config = "/etc/pymq/%i.toml" if "@" in unit else "/etc/pymq/dashboard.toml"
    assert f"--config {config}" in v["ExecStart"][0] and "--log-format json" in v["ExecStart"][0]
    if "broker" in unit:
        assert v["ReadWritePaths"] == ["/var/lib/pymq/%i"] and v["StateDirectory"] == ["pymq/%i"]
    analyze = shutil.which("systemd-analyze")
    if analyze:  # full check of every directive, with the binaries of this environment
        instance = tmp_path / (unit.replace("@", "@example") if "@" in unit else unit)
        bindir = str(Path(sys.executable).parent)
        instance.write_text(path.read_text().replace("/opt/pymq/venv/bin", bindir))
        res = subprocess.run([analyze, "verify", str(instance)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and not res.stderr.strip(), res.stderr


def test_dump_toml_round_trips(monkeypatch) -> None:
    """The launcher's TOML writer reproduces the example configs exactly."""
    spec = importlib.util.spec_from_file_location("local_cluster", LAUNCHER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "local_cluster", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    for path in sorted((DEPLOY / "config").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        data["odd key"] = ['quote " and \\ and é', 1.5, True]
        assert tomllib.loads(mod.dump_toml(data)) == data


def test_launcher_runs_example_cluster_and_stops_cleanly(launch) -> None:
    """The launcher starts 2 nameservers, 2 brokers on loopback; each sees both groups; SIGTERM stops all."""
    t0 = time.monotonic()
    cluster = launch()
    started_in = time.monotonic() - t0
    addrs = cluster.status["namesrv_addr"].split(";")
    assert len(addrs) == 2 and len(cluster.pids) == 4
    for d in cluster.status["daemons"]:
        assert d["address"].startswith("127.0.0.1:") and d["metrics_url"].startswith("http://127.0.0.1:")
        assert f"{d['pid']}" in cluster.output() and alive(d["pid"])
    for addr in addrs:
        info = asyncio.run(cluster_info(addr))
        assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
        for name in ("broker-a", "broker-b"):
            assert info["brokerAddrTable"][name]["brokerAddrs"] == {0: cluster.daemon(name)["address"]}
    for d in cluster.status["daemons"]:
        with urllib.request.urlopen(d["metrics_url"], timeout=5) as resp:
            text = resp.read().decode()
        series = "pymq_namesrv_live_brokers 2.0" if d["kind"] == "namesrv" else "pymq_broker_info{"
        assert series in text, d["name"]
    assert cluster.stop() == 0, cluster.output()
    assert not [pid for pid in cluster.pids if alive(pid)]
    for name in ("broker-a", "broker-b"):
        assert "store_shutdown_clean" in Path(cluster.daemon(name)["log"]).read_text()
    assert not list((cluster.dir / "run").iterdir()), "port files left behind"
    assert started_in < 60


def test_admin_cluster_list_shows_both_groups(launch) -> None:
    """`pymq-admin --json cluster-list` against the launched cluster lists broker-a and broker-b."""
    cluster = launch()
    cmd = [
        sys.executable,
        "-m",
        "pymq.cli.admin",
        "--namesrv",
        cluster.status["namesrv_addr"],
        "--json",
        "cluster-list",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.dumps(json.loads(res.stdout))
    for name in ("broker-a", "broker-b"):
        assert name in out and cluster.daemon(name)["address"] in out
    assert cluster.stop() == 0
    assert not [pid for pid in cluster.pids if alive(pid)]


def test_launcher_stops_everything_when_a_daemon_dies(launch) -> None:
    """SIGKILL on one broker: the launcher stops the other three and exits with 1."""
    cluster = launch("--no-metrics")
    assert all(d["metrics_url"] is None for d in cluster.status["daemons"])
    os.kill(cluster.daemon("broker-b")["pid"], signal.SIGKILL)
    assert cluster.proc.wait(60) == 1
    assert not [pid for pid in cluster.pids if alive(pid)]
    assert "broker-b" in cluster.output() and "exited with code -9" in cluster.output()
