"""pymq-local serves RocketMQ 5.x clients out of the box: its banner names the gRPC endpoint, the official
5.x Python client sends and receives there (topics are created on first use, as for pymq's own SDK)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rocketmq5.conftest import run_client

pytestmark = pytest.mark.integration


async def test_pymq_local_serves_the_5x_client(tmp_path: Path, free_ports, rocketmq5_python: Path) -> None:
    ns_port, broker_port, grpc_port = free_ports(3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymq.cli.local", "--namesrv-port", str(ns_port), "--broker-port", str(broker_port),
         "--grpc-port", str(grpc_port), "--store-dir", str(tmp_path / "store")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            lines.append(line)
            if "Press Ctrl-C" in line:
                break
        banner = "".join(lines)
        assert f"gRPC        127.0.0.1:{grpc_port}" in banner, banner
        endpoint = f"127.0.0.1:{grpc_port}"
        sent = await run_client(
            rocketmq5_python,
            "produce.py",
            {"endpoint": endpoint, "topic": "first-5x", "messages": [{"body": "hi from 5.x", "tag": "T"}]},
        )
        assert "message_id" in sent[0], sent
        got = await run_client(
            rocketmq5_python,
            "consume.py",
            {"endpoint": endpoint, "group": "g-local", "topic": "first-5x", "count": 1, "invisible_s": 10},
        )
        assert got["errors"] == []
        assert [(m["body"], m["tag"], m["message_id"]) for m in got["messages"]] == [
            ("hi from 5.x", "T", sent[0]["message_id"])
        ]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
