"""pymq-broker --grpc-port: the gRPC front end in the broker's process (RocketMQ's proxy "local mode")."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.client.admin import AdminClient
from pymq.testing import LocalCluster
from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


async def test_broker_with_grpc_port_serves_the_5x_client(tmp_path: Path, free_ports, rocketmq5_python: Path) -> None:
    (grpc_port,) = free_ports(1)
    async with LocalCluster(tmp_path / "c", brokers=0) as cluster:
        port_file = tmp_path / "broker.port"
        proc = subprocess.Popen(
            [sys.executable, "-m", "pymq.cli.broker", "--namesrv", cluster.namesrv_addr, "--host", "127.0.0.1",
             "--port", "0", "--grpc-port", str(grpc_port), "--store-dir", str(tmp_path / "store"), "--small-files",
             "--broker-name", "local-mode", "--port-file", str(port_file), "--log-format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not port_file.exists():
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()  # type: ignore[union-attr]
                await asyncio.sleep(0.05)
            endpoint = f"127.0.0.1:{grpc_port}"
            async with AdminClient(cluster.namesrv_addr) as admin:
                await admin.create_topic("local-mode-topic", 2, broker_addr=port_file.read_text().strip())
            spec = {"endpoint": endpoint, "topic": "local-mode-topic", "messages": [{"body": "in the broker"}]}
            sent = await run_client(rocketmq5_python, "produce.py", spec)
            assert "message_id" in sent[0], sent
            args = {
                "endpoint": endpoint,
                "group": "g-local",
                "topic": "local-mode-topic",
                "count": 1,
                "invisible_s": 10,
            }
            got = await run_client(rocketmq5_python, "consume.py", args)
            assert got["errors"] == [] and [m["body"] for m in got["messages"]] == ["in the broker"]
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
