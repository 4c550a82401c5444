"""The official RocketMQ 5 Python client (rocketmq-python-client==5.1.2) in its own venv, and a pymq
cluster with the gRPC front end in front of it.

The client's ``rocketmq`` package clashes with the 4.x client's, so it never enters this
process: the tests run small scripts (``clients/``) with the venv's python as subprocesses.
The venv lives in ``.ci-cache/rocketmq5-venv`` (made once, reused). Without PyPI the tests
skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from pymq.client.admin import AdminClient
from pymq.errors import PymqError
from pymq.grpc_proxy import GrpcProxy
from pymq.grpc_proxy.settings import ProxySettings
from pymq.testing import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".ci-cache" / "rocketmq5-venv"
PY = VENV / "bin" / "python"
CLIENTS = Path(__file__).parent / "clients"
REQUIREMENT = "rocketmq-python-client==5.1.2"


def _ensure_venv() -> str | None:
    """None when the client is importable in the venv, else why not."""
    check = [
        str(PY),
        "-c",
        "import rocketmq.v5, importlib.metadata as m; assert m.version('rocketmq-python-client') == '5.1.2'",
    ]
    if PY.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return None
    VENV.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True, text=True)
    if made.returncode != 0:
        return f"python -m venv failed: {made.stderr[-500:]}"
    pip = subprocess.run([str(PY), "-m", "pip", "install", "-q", REQUIREMENT], capture_output=True, text=True)
    if pip.returncode != 0:
        return f"pip install {REQUIREMENT} failed: {pip.stderr[-500:]}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return f"{REQUIREMENT} installed but not importable"
    return None


@pytest.fixture(scope="session")
def rocketmq5_python() -> Path:
    """The venv python that has the official 5.x client."""
    why = _ensure_venv()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the RocketMQ 5 client is unavailable: {why}")
        pytest.skip(f"RocketMQ 5 client unavailable: {why}")
    return PY


async def run_client(python: Path, script: str, args: dict[str, Any], timeout: float = 40.0) -> Any:
    """Run ``clients/<script>`` with the 5.x venv (without blocking this loop, which serves the front end)."""
    proc = await asyncio.create_subprocess_exec(
        str(python),
        str(CLIENTS / script),
        json.dumps(args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(CLIENTS),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, f"{script} exited {proc.returncode}: {err.decode()[-3000:]}"
    lines = [line for line in out.decode().splitlines() if line.strip()]
    assert lines, f"{script} printed nothing: {err.decode()[-3000:]}"
    return json.loads(lines[-1])


#: pop revive every 50 ms: an unacked message is visible again right after its invisible time
FAST_REVIVE = {"pop_revive_interval_seconds": 0.05}


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, GrpcProxy]]:
    """An in-process cluster (1 namesrv, 1 broker) with topic ``t5`` and the gRPC front end on a free port.

    Consumers are told to long-poll 2 s (not 20): a PushConsumer's shutdown waits for its receives."""
    async with LocalCluster(tmp_path / "c", brokers=1, broker=FAST_REVIVE) as c:
        await c.create_topic("t5", 4)
        async with GrpcProxy(c.namesrv_addr, port=0, settings=ProxySettings(long_polling_ms=2000)) as proxy:
            yield c, proxy


# --- 5.x clients kept running, and the brokers' connection listings ------------------------------------


@asynccontextmanager
async def lingering(
    python: Path, proxy: GrpcProxy, group: str, topic: str = "t5", **credentials: str
) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
    """A 5.x Producer (``topic``) and SimpleConsumer (``group``) kept running by ``clients/linger.py``."""
    args = {"endpoint": f"127.0.0.1:{proxy.port}", "topic": topic, "group": group, **credentials}
    proc = await asyncio.create_subprocess_exec(
        str(python), str(CLIENTS / "linger.py"), json.dumps(args),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(CLIENTS),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line, f"linger.py ended: {(await proc.stderr.read()).decode()[-3000:] if proc.stderr else ''}"
        ready = json.loads(line)
        assert ready["ready"] and ready["producer"] and ready["consumer"], ready
        yield proc, ready
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def consumers_of(admin: AdminClient, group: str) -> list[dict[str, Any]]:
    try:
        return list((await admin.consumer_connection(group))["connections"])
    except PymqError:  # no broker knows the group (none of its clients is connected)
        return []


async def producers_of(admin: AdminClient, group: str) -> list[dict[str, Any]]:
    return list((await admin.producer_connections()).get(group, []))
