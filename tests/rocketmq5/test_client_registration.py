"""5.x clients are registered with the brokers by the front end (as RocketMQ's proxy does), so
``consumer-connection``, ``producer-connection`` and the dashboard list them: language PYTHON,
protocol grpc, the client's own id; and they disappear when the client shuts down or goes away."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from pymq.client.admin import AdminClient
from pymq.grpc_proxy import GrpcProxy
from pymq.testing import LocalCluster
from tests.helpers import run_admin, wait_until_async
from tests.rocketmq5.conftest import consumers_of, lingering, producers_of

pytestmark = pytest.mark.integration


async def test_5x_clients_listed_with_language_and_protocol_then_gone_after_shutdown(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    cluster, proxy = proxied
    async with AdminClient(cluster.namesrv_addr) as admin, lingering(rocketmq5_python, proxy, "g-conn") as (p, ids):
        await wait_until_async(
            lambda: _has(consumers_of(admin, "g-conn"), ids["consumer"]), timeout=15, what="consumer listed"
        )
        await wait_until_async(lambda: _has(producers_of(admin, "t5"), ids["producer"]), timeout=15, what="producer")
        # what pymq-admin prints (the same admin RPCs the dashboard reads)
        code, out, err = await run_admin(cluster.namesrv_addr, "--json", "consumer-connection", "--group", "g-conn")
        assert code == 0, err
        conn = json.loads(out)
        [c] = [c for c in conn["connections"] if c["clientId"] == ids["consumer"]]
        assert (c["language"], c["protocol"], c["version"]) == ("PYTHON", "grpc", 437), c  # 5.1.2 is V5_1_2
        assert conn["consumeType"] == "CONSUME_ACTIVELY" and conn["messageModel"] == "CLUSTERING", conn
        assert [(s["topic"], s["subString"]) for s in conn["subscriptions"]] == [("t5", "TagA||TagB")], conn
        code, out, err = await run_admin(cluster.namesrv_addr, "--json", "producer-connection", "--group", "t5")
        assert code == 0, err
        [pc] = [c for c in json.loads(out)["t5"] if c["clientId"] == ids["producer"]]
        assert (pc["language"], pc["protocol"]) == ("PYTHON", "grpc"), pc
        code, human, err = await run_admin(cluster.namesrv_addr, "consumer-connection", "--group", "g-conn")
        assert code == 0 and "PROTOCOL" in human and "grpc" in human, (human, err)
        # the client shuts down: NotifyClientTermination, then its streams end
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(b"stop\n")
        await p.stdin.drain()
        assert json.loads(await asyncio.wait_for(p.stdout.readline(), 30)) == {"stopped": True}
        await wait_until_async(
            lambda: _lacks(consumers_of(admin, "g-conn"), ids["consumer"]), timeout=10, what="consumer gone"
        )
        await wait_until_async(
            lambda: _lacks(producers_of(admin, "t5"), ids["producer"]), timeout=10, what="producer gone"
        )
    assert not proxy.service or not proxy.service.clients.clients


async def test_5x_client_killed_is_unregistered_when_its_stream_ends(
    proxied: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    """No NotifyClientTermination (SIGKILL): the Telemetry stream's end unregisters the client."""
    cluster, proxy = proxied
    async with AdminClient(cluster.namesrv_addr) as admin, lingering(rocketmq5_python, proxy, "g-kill") as (p, ids):
        await wait_until_async(
            lambda: _has(consumers_of(admin, "g-kill"), ids["consumer"]), timeout=15, what="consumer listed"
        )
        p.send_signal(signal.SIGKILL)
        await p.wait()
        await wait_until_async(
            lambda: _lacks(consumers_of(admin, "g-kill"), ids["consumer"]), timeout=15, what="consumer gone"
        )
        await wait_until_async(
            lambda: _lacks(producers_of(admin, "t5"), ids["producer"]), timeout=15, what="producer gone"
        )


async def _has(rows: Any, client_id: str) -> bool:
    return any(r["clientId"] == client_id for r in await rows)


async def _lacks(rows: Any, client_id: str) -> bool:
    return not await _has(rows, client_id)
