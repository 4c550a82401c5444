"""A consumer's running info and stacks end to end (issue 33), in one process: a LocalCluster, a real
PushConsumer (concurrent, then orderly), AdminClient, pymq-admin (a subprocess) and the dashboard's page
(served by DashboardServer, fetched over HTTP: no browser); and a client that never answers."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer, PushConsumer, broker_api
from pymq.client.admin import AdminClient
from pymq.config import DashboardConfig
from pymq.dashboard.server import DashboardServer
from pymq.errors import ConsumerNotOnlineError, SystemError_
from pymq.protocol.codes import RequestCode
from pymq.testing import LocalCluster
from pymq.transport.client import RpcClient
from pymq.transport.dispatch import Dispatcher
from tests.helpers import wait_until, wait_until_async

pytestmark = pytest.mark.integration

FAST = {"rebalance_interval_seconds": 0.5, "heartbeat_interval_seconds": 0.5}


@pytest.fixture
async def cluster(tmp_path: Path):
    async with LocalCluster(tmp_path / "c", brokers=2) as c:
        await c.create_topic("orders", 4)
        yield c


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def owned(consumer: PushConsumer, n: int) -> None:
    """``n`` queues of ``orders`` owned (and the retry topic's, if the consumer consumes it)."""
    await wait_until(
        lambda: sum(1 for mq in consumer.process_queues if mq.topic == "orders") == n, timeout=15, what=f"{n} owned"
    )


async def test_running_info_through_admin_cli_and_dashboard(cluster: LocalCluster) -> None:
    release = asyncio.Event()
    seen: list = []
    consumer = PushConsumer(
        cluster.namesrv_addr, "g-run", instance_name="run-1", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST
    )
    consumer.subscribe("orders", "*")

    @consumer.listener
    async def on(msgs):  # holds its messages until released: they stay cached in the process queues
        seen.extend(msgs)
        await release.wait()

    dashboard = DashboardServer(DashboardConfig(port=0, namesrv_addrs=cluster.namesrv_addrs, poll_interval_seconds=60))
    async with consumer, Producer(cluster.namesrv_addr) as producer, AdminClient(cluster.namesrv_addr) as admin:
        for i in range(8):
            await producer.send(Message("orders", f"m{i}".encode()))
        await owned(consumer, 8)  # 2 brokers x 4 queues
        await wait_until(lambda: len(seen) >= 1, what="a message consumed")
        client_id = consumer.instance.client_id

        info = await admin.consumer_running_info("g-run", client_id)
        assert info["clientId"] == client_id and info["group"] == "g-run" and info["format"] == "pymq"
        assert info["brokerName"] in {"broker-a", "broker-b"} and "jstack" not in info
        assert {s["topic"] for s in info["subscriptionSet"]} == {"orders", "%RETRY%g-run"}
        queues = {(r["mq"]["topic"], r["mq"]["brokerName"], r["mq"]["queueId"]) for r in info["mqTable"]}
        assert {q for q in queues if q[0] == "orders"} == {
            ("orders", b, q) for b in ("broker-a", "broker-b") for q in range(4)
        }
        rows = [r["pq"] for r in info["mqTable"]]
        assert sum(r["cachedMsgCount"] for r in rows) >= 1  # held by the listener
        assert all(r["lastPullTimestamp"] > 0 and r["locked"] is False for r in rows)
        assert info["properties"]["consumeOkTotal"] == 0  # the listener holds its first batch

        stacks = await admin.consumer_running_info("g-run", client_id, jstack=True)
        assert "pymq-client-heartbeat" in stacks["jstack"] and '"MainThread"' in stacks["jstack"]

        with pytest.raises(
            ConsumerNotOnlineError, match=re.escape("consumer 1.2.3.4@x of group g-run is not connected")
        ):
            await admin.consumer_running_info("g-run", "1.2.3.4@x")

        # pymq-admin, a process of its own
        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", cluster.namesrv_addr, *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

        out = await asyncio.to_thread(
            cli, "--json", "consumer-running-info", "--group", "g-run", "--client-id", client_id
        )
        assert out.returncode == 0, out.stderr
        assert len(json.loads(out.stdout)["mqTable"]) == len(consumer.process_queues)
        out = await asyncio.to_thread(
            cli, "consumer-running-info", "--group", "g-run", "--client-id", client_id, "--jstack"
        )
        assert out.returncode == 0, out.stderr
        assert "orders@broker-a:0" in out.stdout and "LAST CONSUME" in out.stdout and "Asyncio tasks (" in out.stdout
        out = await asyncio.to_thread(cli, "consumer-running-info", "--group", "g-run", "--client-id", "nobody@1")
        assert out.returncode != 0 and "nobody@1" in out.stderr

        # the dashboard: the group page links each client's running info and stacks
        await dashboard.start()
        try:
            base = dashboard.url.rstrip("/")
            status, page = await asyncio.to_thread(fetch, f"{base}/groups/g-run")
            assert status == 200, page
            link = f"/groups/g-run/clients/{urllib.parse.quote(client_id, safe='')}"
            assert f'href="{link}"' in page and f'href="{link}?jstack=1"' in page
            status, page = await asyncio.to_thread(fetch, base + link)
            assert status == 200, page
            assert 'id="process-queues"' in page and "broker-a" in page and "%RETRY%g-run" in page
            assert 'id="stacks"' not in page and 'id="stacks-link"' in page
            status, page = await asyncio.to_thread(fetch, base + link + "?jstack=1")
            assert status == 200 and 'id="stacks"' in page and "pymq-client-heartbeat" in page
            status, page = await asyncio.to_thread(fetch, f"{base}/groups/g-run/clients/nobody%401")
            assert status == 502 and 'id="running-info-error"' in page and "nobody@1" in page
        finally:
            await dashboard.close()
        release.set()


async def test_an_orderly_consumer_shows_its_locks(cluster: LocalCluster) -> None:
    consumer = PushConsumer(cluster.namesrv_addr, "g-ord", instance_name="ord-1", lock_renew_interval=0.5, **FAST)
    consumer.subscribe("orders", "*")
    consumer.register_orderly_listener(lambda msgs: None)
    async with consumer, AdminClient(cluster.namesrv_addr) as admin:
        await owned(consumer, 8)
        client_id = consumer.instance.client_id

        async def all_locked() -> bool:
            info = await admin.consumer_running_info("g-ord", client_id)
            rows = [r for r in info["mqTable"] if r["mq"]["topic"] == "orders"]
            return len(rows) == 8 and all(r["pq"]["locked"] for r in rows)

        await wait_until_async(all_locked, timeout=15, what="every queue locked")
        info = await admin.consumer_running_info("g-ord", client_id)
        assert info["properties"]["consumeOrderly"] is True
        assert all(r["pq"]["lastLockTimestamp"] > 0 for r in info["mqTable"] if r["mq"]["topic"] == "orders")


async def test_a_pull_consumer_answers_too(cluster: LocalCluster) -> None:
    """A PullConsumer (consume type CONSUME_ACTIVELY) reports its owned queues the same way."""
    consumer = PullConsumer(
        cluster.namesrv_addr, "g-pull", instance_name="pull-1", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST
    )
    consumer.subscribe("orders", "*")
    async with consumer, Producer(cluster.namesrv_addr) as producer, AdminClient(cluster.namesrv_addr) as admin:
        for i in range(5):
            await producer.send(Message("orders", f"p{i}".encode()))
        got: list = []
        while len(got) < 5:
            got.extend(await consumer.poll(timeout=2))
        info = await admin.consumer_running_info("g-pull", consumer.instance.client_id)
        assert info["properties"]["consumeType"] == "CONSUME_ACTIVELY"
        assert info["properties"]["consumerClass"] == "PullConsumer"
        assert len([r for r in info["mqTable"] if r["mq"]["topic"] == "orders"]) == 8


async def test_a_client_that_never_answers(cluster: LocalCluster) -> None:
    """A raw connection heartbeats as a consumer and leaves GET_CONSUMER_RUNNING_INFO unanswered."""
    asked: list = []
    silent = RpcClient(Dispatcher({RequestCode.GET_CONSUMER_RUNNING_INFO: lambda cmd, ch: asked.append(cmd)}))
    consumer = {
        "groupName": "g-silent",
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": [],
    }
    try:
        for broker in cluster.brokers:
            await silent.invoke_ok(broker.address, broker_api.heartbeat("9.9.9.9@silent", [], [consumer]))
        async with AdminClient(cluster.namesrv_addr) as admin:
            started = asyncio.get_running_loop().time()
            with pytest.raises(
                SystemError_, match=re.escape("consumer 9.9.9.9@silent of group g-silent did not answer within 3s")
            ):
                await admin.consumer_running_info("g-silent", "9.9.9.9@silent")
            assert 2.9 < asyncio.get_running_loop().time() - started < 4.9
        assert len(asked) == 1 and asked[0].ext["clientId"] == "9.9.9.9@silent"
    finally:
        await silent.close()
