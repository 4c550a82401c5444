"""Issue 33's operator requests end to end, in one process (a LocalCluster, real clients, no browser):
CONSUME_MESSAGE_DIRECTLY through the broker to push consumers (concurrent, blocking, orderly), and
the ACL accounts edited through the brokers (UPDATE_AND_CREATE_ACL_CONFIG / DELETE_ACL_CONFIG)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer, PushConsumer
from pymq.client.admin import AdminClient
from pymq.client.consumer_types import ConsumeOrderlyResult
from pymq.errors import ConsumerNotOnlineError, NoPermissionError, PymqError, RequestCodeNotSupportedError
from pymq.testing import LocalCluster
from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, admin_account, write_acl
from tests.helpers import wait_until, wait_until_async

pytestmark = pytest.mark.integration

FAST = {"rebalance_interval_seconds": 0.5, "heartbeat_interval_seconds": 0.5}


@pytest.fixture
async def cluster(tmp_path: Path):
    async with LocalCluster(tmp_path / "c") as c:
        await c.create_topic("orders", 2)
        yield c


async def test_consume_message_directly_runs_the_listener_and_moves_no_offset(cluster: LocalCluster) -> None:
    seen: list[tuple[str, bytes]] = []
    consumer = PushConsumer(
        cluster.namesrv_addr, "g-direct", instance_name="d-1", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST
    )
    consumer.subscribe("orders", "*")

    @consumer.listener
    async def on(msgs):
        seen.extend((m.msg_id, m.body) for m in msgs)

    async with consumer, Producer(cluster.namesrv_addr) as producer, AdminClient(cluster.namesrv_addr) as admin:
        sent = await producer.send(Message("orders", b"resend me", keys="k-1"))
        await wait_until(lambda: len(seen) == 1, timeout=15, what="the message consumed")
        await wait_until(lambda: consumer.offset_store is not None, what="offsets")
        before = await admin.consumer_progress("g-direct")
        client_id = consumer.instance.client_id

        result = await admin.consume_message_directly("g-direct", sent.offset_msg_id, client_id)
        assert result["consumeResult"] == "CR_RETURN_NULL" and "counted as success" in result["remark"]
        assert result["clientId"] == client_id and result["brokerName"] == "broker-a"
        assert result["order"] is False and result["spentTimeMills"] >= 0
        assert seen == [(sent.msg_id, b"resend me")] * 2
        # by unique id and topic, any client of the group
        result = await admin.consume_message_directly("g-direct", sent.msg_id, topic="orders")
        assert result["clientId"] == client_id and len(seen) == 3
        after = await admin.consumer_progress("g-direct")
        assert [r["consumerOffset"] for r in after["queues"]] == [r["consumerOffset"] for r in before["queues"]]

        not_there = re.escape("consumer 1.2.3.4@x of group g-direct is not connected")
        with pytest.raises(ConsumerNotOnlineError, match=not_there):
            await admin.consume_message_directly("g-direct", sent.offset_msg_id, "1.2.3.4@x")
        with pytest.raises(ConsumerNotOnlineError, match="no consumer of group nobody"):
            await admin.consume_message_directly("nobody", sent.offset_msg_id)

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", cluster.namesrv_addr, *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

        out = await asyncio.to_thread(
            cli, "--json", "consume-message-directly", "--group", "g-direct", "--msg-id", sent.offset_msg_id
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["consumeResult"] == "CR_RETURN_NULL" and len(seen) == 4
        out = await asyncio.to_thread(
            cli, "consume-message-directly", "--group", "g-direct", "--msg-id", sent.offset_msg_id, "--client-id", "x@1"
        )
        assert out.returncode == 1 and "x@1" in out.stderr


async def test_blocking_orderly_and_pull_consumers(cluster: LocalCluster) -> None:
    """A blocking listener that raises, an orderly one that suspends, and a pull consumer (no listener)."""

    def boom(msgs):
        raise ValueError("bad order")

    raising = PushConsumer(cluster.namesrv_addr, "g-raise", instance_name="r-1", **FAST)
    raising.subscribe("orders", "*")
    raising.register_listener(boom)
    orderly = PushConsumer(cluster.namesrv_addr, "g-orderly", instance_name="o-1", **FAST)
    orderly.subscribe("orders", "*")
    orderly.register_orderly_listener(lambda msgs: ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT)
    puller = PullConsumer(cluster.namesrv_addr, "g-pull", instance_name="p-1", **FAST)
    puller.subscribe("orders", "*")
    async with raising, orderly, puller, Producer(cluster.namesrv_addr) as producer:
        sent = await producer.send(Message("orders", b"x"))
        async with AdminClient(cluster.namesrv_addr) as admin:
            result = await admin.consume_message_directly("g-raise", sent.offset_msg_id)
            assert result["consumeResult"] == "CR_THROW_EXCEPTION" and result["remark"] == "ValueError: bad order"
            result = await admin.consume_message_directly("g-orderly", sent.offset_msg_id)
            assert result["consumeResult"] == "CR_LATER" and result["order"] is True
            assert "SUSPEND_CURRENT_QUEUE_A_MOMENT" in result["remark"]
            with pytest.raises(RequestCodeNotSupportedError, match="has no listener"):
                await admin.consume_message_directly("g-pull", sent.offset_msg_id)


ACL = acl_toml(admin_account("ops"), account("viewer", default_topic_perm="SUB", default_group_perm="SUB"))
OPS = {"access_key": "ops", "secret_key": "ops-secret"}


async def test_acl_accounts_edited_through_the_brokers(tmp_path: Path) -> None:
    acl = write_acl(tmp_path / "acl.toml", ACL)
    secured = {"acl": {"enable": True, "file": str(acl), **BROKER_CREDENTIALS}}
    async with (
        LocalCluster(tmp_path / "c", broker=secured) as cluster,
        AdminClient(cluster.namesrv_addr, **OPS) as admin,
    ):
        info = await admin.acl_accounts()
        assert info["writable"] is True and "app" not in {a["accessKey"] for a in info["accounts"]}
        app = {"accessKey": "app", "secretKey": "app-secret-1", "topicPerms": {"orders": "PUB"}, "admin": False}
        assert await admin.acl_update(app) == {"broker-a/0": {"accessKey": "app", "created": True}}
        # the new account is accepted at once (the broker reloaded the file it wrote)
        await cluster.create_topic("orders", 2)
        async with Producer(cluster.namesrv_addr, access_key="app", secret_key="app-secret-1") as producer:
            await producer.send(Message("orders", b"signed by app"))
        accounts = {a["accessKey"]: a for a in (await admin.acl_accounts())["accounts"]}
        assert accounts["app"]["topicPerms"] == {"orders": "PUB"} and "secretKey" not in accounts["app"]
        # updated without a secret: the secret is kept; the white address is shown
        await admin.acl_update({"accessKey": "app", "defaultGroupPerm": "SUB", "whiteRemoteAddress": "10.0.0.*"})
        written = tomllib.loads(acl.read_text())
        entry = next(a for a in written["accounts"] if a["access_key"] == "app")
        assert entry["secret_key"] == "app-secret-1" and entry["default_group_perm"] == "SUB"
        accounts = {a["accessKey"]: a for a in (await admin.acl_accounts())["accounts"]}
        assert accounts["app"]["whiteRemoteAddress"] == ["10.0.0.*"] and accounts["app"]["topicPerms"] == {}
        assert not list(tmp_path.glob(".acl.toml.*"))  # no temporary file left behind

        with pytest.raises(PymqError, match="needs a secretKey"):
            await admin.acl_update({"accessKey": "new-without-secret"})
        with pytest.raises(PymqError, match="permission must be"):
            await admin.acl_update({"accessKey": "bad", "secretKey": "bad-secret", "defaultTopicPerm": "ALL"})
        async with AdminClient(cluster.namesrv_addr, access_key="viewer", secret_key="viewer-secret") as viewer:
            with pytest.raises(NoPermissionError, match="admin permission required"):
                await viewer.acl_update({"accessKey": "viewer", "secretKey": "viewer-secret", "admin": True})

        assert await admin.acl_delete("app") == {"broker-a/0": {"accessKey": "app", "deleted": True}}
        assert await admin.acl_delete("app") == {"broker-a/0": {"accessKey": "app", "deleted": False}}
        with pytest.raises(PymqError):
            async with Producer(cluster.namesrv_addr, access_key="app", secret_key="app-secret-1") as producer:
                await producer.send(Message("orders", b"no longer"))
        # the brokers' own admin account and ops: removing both would lock every admin out
        await admin.acl_delete("broker")
        with pytest.raises(PymqError, match="last admin account"):
            await admin.acl_update({"accessKey": "ops", "admin": False})

        # a broker that cannot edit (here: ACL off) is reported; the others still change
        await cluster.add_broker(acl={"enable": False})
        await wait_until_async(lambda: _masters(admin, 2), what="broker-b registered")
        result = await admin.acl_update({"accessKey": "late", "secretKey": "late-secret"})
        assert result["broker-a/0"] == {"accessKey": "late", "created": True}
        assert "ACL is off" in result["broker-b/0"]["error"]

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            signed = ["--access-key", "ops", "--secret-key", "ops-secret"]
            cmd = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", cluster.namesrv_addr, *signed, *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

        out = await asyncio.to_thread(cli, "acl-delete", "--account", "late")
        assert out.returncode == 1 and "broker-a/0: deleted" in out.stdout and "broker-b/0: error:" in out.stdout
        out = await asyncio.to_thread(cli, "acl-accounts")
        assert out.returncode == 0 and "ops" in out.stdout and "late" not in out.stdout and "secret" not in out.stdout


async def _masters(admin: AdminClient, n: int) -> bool:
    return len(await admin.master_addrs()) == n


async def test_acl_off_refuses_edits(cluster: LocalCluster) -> None:
    async with AdminClient(cluster.namesrv_addr) as admin:
        assert (await admin.acl_accounts())["writable"] is False
        with pytest.raises(PymqError, match="ACL is off"):
            await admin.acl_update({"accessKey": "x", "secretKey": "x-secret"})
