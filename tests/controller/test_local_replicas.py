"""``pymq-local --replicas 2`` (issue 32): a master and its slave as child processes with the
controller in pymq-local; kill -9 the master it printed, and a consumer carries on from the
elected slave while the killed broker is started again as a slave."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from pymq.errors import PymqError
from pymq.protocol.message import MessageExt
from tests.helpers import wait_until

pytestmark = pytest.mark.integration


def admin(ns: str, *args: str) -> str:
    cmd = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", ns, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout


async def test_pymq_local_replicas_survives_kill_9_of_its_master(tmp_path: Path, free_ports) -> None:
    (ns_port,) = free_ports(1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymq.cli.local", "--replicas", "2", "--namesrv-port", str(ns_port),
         "--broker-port", "0", "--store-dir", str(tmp_path / "store")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    out: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            out.append(proc.stdout.readline())  # type: ignore[union-attr]
            if "Press Ctrl-C" in out[-1]:
                break
        banner = "".join(out)
        assert "automatic failover" in banner, banner
        ns = f"127.0.0.1:{ns_port}"
        pid = int(re.search(r"kill -9 (\d+)", banner).group(1))  # type: ignore[union-attr]
        master = re.search(r"master (\S+) \(SYNC_MASTER\)", banner).group(1)  # type: ignore[union-attr]
        admin(ns, "topic-create", "--topic", "hello", "--queues", "2")

        seen: set[bytes] = set()
        consumer = PushConsumer(ns, "g", consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                rebalance_interval_seconds=1.0, poll_namesrv_interval_seconds=0.5)  # fmt: skip
        consumer.subscribe("hello")

        @consumer.listener
        async def on(msgs: list[MessageExt]) -> None:
            seen.update(m.body for m in msgs)

        sent: set[bytes] = set()
        async with consumer, Producer(ns, "p", poll_namesrv_interval_seconds=0.5) as producer:
            for i in range(20):
                await producer.send(Message("hello", f"before-{i}".encode()))
                sent.add(f"before-{i}".encode())
            await wait_until(lambda: sent <= seen, 20, 0.05, "consumed before")
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            i = 0
            while i < 20 and time.monotonic() < deadline:
                try:
                    result = await producer.send(Message("hello", f"after-{i}".encode()), timeout=2.0)
                except PymqError:
                    await asyncio.sleep(0.1)
                    continue
                assert result.store_addr != master
                sent.add(f"after-{i}".encode())
                i += 1
            assert i == 20
            await wait_until(lambda: sent <= seen, 30, 0.05, "the consumer carried on")
        status = admin(ns, "controller-status")
        assert "master heartbeat lapsed" in status, status
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, rest
        assert "starting it again as a slave" in rest and "stopped." in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
