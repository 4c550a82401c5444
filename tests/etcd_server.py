"""A real etcd (Debian's ``etcd-server``) for the controller's etcd tests: ephemeral loopback ports,
a temporary data directory, stopped by PID. Missing etcd skips the test, or fails it under
CI=true (``.ci/run`` installs etcd-server)."""

from __future__ import annotations

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


@contextmanager
def etcd_server(workdir: Path, free_ports: Callable[[int], list[int]]) -> Iterator[str]:
    """Start etcd; yields its client URL; stops it (SIGTERM, then SIGKILL) by PID."""
    binary = etcd_binary()
    client, peer = free_ports(2)
    workdir.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{client}"
    args = [
        binary, "--name", "t", "--data-dir", str(workdir / "etcd-data"),
        "--listen-client-urls", url, "--advertise-client-urls", url,
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"t=http://127.0.0.1:{peer}",
    ]  # fmt: skip
    with open(workdir / "etcd.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                    if b"true" in resp.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start:\n{(workdir / 'etcd.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
