"""pymq-proxy, the stand-alone gRPC front end daemon: finds the brokers through the nameserver, serves the
official 5.x client, writes its port file, stops with exit 0 on SIGTERM; a bad config exits 2."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.testing import LocalCluster
from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


async def test_pymq_proxy_daemon_serves_the_5x_client(tmp_path: Path, rocketmq5_python: Path) -> None:
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster:
        await cluster.create_topic("via-proxy", 2)
        port_file = tmp_path / "proxy.port"
        proc = subprocess.Popen(
            [sys.executable, "-m", "pymq.cli.proxy", "--namesrv", cluster.namesrv_addr, "--host", "127.0.0.1",
             "--port", "0", "--port-file", str(port_file), "--log-format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not port_file.exists():
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()  # type: ignore[union-attr]
                await asyncio.sleep(0.05)
            endpoint = port_file.read_text().strip()
            spec = {"endpoint": endpoint, "topic": "via-proxy", "messages": [{"body": "through the daemon"}]}
            sent = await run_client(rocketmq5_python, "produce.py", spec)
            assert "message_id" in sent[0], sent
            args = {"endpoint": endpoint, "group": "g-daemon", "topic": "via-proxy", "count": 1, "invisible_s": 10}
            got = await run_client(rocketmq5_python, "consume.py", args)
            assert got["errors"] == [] and [m["body"] for m in got["messages"]] == ["through the daemon"]
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_pymq_proxy_bad_namesrv_is_a_config_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.proxy", "--namesrv", "no-port-here", "--port", "0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error:") and "no-port-here" in out.stderr and "Traceback" not in out.stderr
