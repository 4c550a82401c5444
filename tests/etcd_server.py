"""A real etcd (Debian's ``etcd-server``) for the controller's etcd tests: ephemeral loopback ports,
a temporary data directory, stopped by PID. Missing etcd skips the test, or fails it under
CI=true (``.ci/run`` installs etcd-server)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no etcd on the PATH: .ci/run installs Debian's etcd-server")
        pytest.skip("etcd is not installed (Debian: apt-get install etcd-server)")
    return path


#: a fast raft for the tests: a dead leader is replaced in about a second (etcd's minimum lease
#: TTL becomes 1.5 x 500 ms, below the tests' 2 s)
FAST_RAFT = ["--heartbeat-interval", "50", "--election-timeout", "500"]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], logfile: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if b"true" in resp.read():
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"etcd did not start:\n{logfile.read_text()[-2000:]}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextmanager
def etcd_server(workdir: Path, free_ports: Callable[[int], list[int]]) -> Iterator[str]:
    """Start etcd; yields its client URL; stops it (SIGTERM, then SIGKILL) by PID."""
    with etcd_cluster(workdir, free_ports, members=1) as cluster:
        yield cluster.urls[0]


class EtcdCluster:
    """Members ``t0``, ``t1``, ... of one etcd cluster; :meth:`kill` is a kill -9 of one by PID."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def kill(self, i: int) -> None:
        if self.procs[i].poll() is None:
            self.procs[i].kill()
            self.procs[i].wait(5)

    def leader(self) -> int:
        """The index of the member that is raft leader now (-1: none known to a live member)."""
        ids = []
        for url in self.urls:
            try:
                headers = {"Content-Type": "application/json"}
                req = urllib.request.Request(f"{url}/v3/maintenance/status", b"{}", headers)
                with urllib.request.urlopen(req, timeout=2) as resp:
                    st = json.loads(resp.read())
                ids.append((st["header"]["member_id"], st.get("leader", "")))
            except OSError:
                ids.append(("", ""))
        return next((i for i, (member, leader) in enumerate(ids) if member and member == leader), -1)


@contextmanager
def etcd_cluster(workdir: Path, free_ports: Callable[[int], list[int]], members: int = 3) -> Iterator[EtcdCluster]:
    """Start ``members`` etcd processes as one cluster on loopback ports (a temporary data directory
    each); yields them once every member is healthy; stops each (SIGTERM, then SIGKILL) by PID."""
    binary = etcd_binary()
    ports = free_ports(2 * members)
    workdir.mkdir(parents=True, exist_ok=True)
    peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(members)]
    initial = ",".join(f"t{i}={p}" for i, p in enumerate(peers))
    cluster = EtcdCluster()
    try:
        for i in range(members):
            url = f"http://127.0.0.1:{ports[2 * i]}"
            args = [
                binary, "--name", f"t{i}", "--data-dir", str(workdir / f"etcd-data-{i}"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
                "--initial-cluster", initial, "--initial-cluster-state", "new", *FAST_RAFT,
            ]  # fmt: skip
            with open(workdir / f"etcd-{i}.log", "wb") as log:
                cluster.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))
            cluster.urls.append(url)
        for i, url in enumerate(cluster.urls):
            _wait_healthy(url, cluster.procs[i], workdir / f"etcd-{i}.log")
        yield cluster
    finally:
        for proc in cluster.procs:
            _stop(proc)
