"""ACL on a running in-process cluster: signed clients of every kind succeed; unsigned, wrongly
signed, replayed, expired and under-privileged requests are refused by broker and nameserver."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer, PushConsumer, broker_api
from pymq.client.admin import AdminClient
from pymq.client.send_result import SendResult
from pymq.client.transaction_producer import TransactionProducer, TransactionState
from pymq.errors import ConfigError, NoPermissionError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.frame import FrameDecoder, encode_bytes
from pymq.protocol.record import encode_record
from pymq.protocol.requests import SendMessageRequest, TopicRequest
from pymq.protocol.transaction import TRANSACTION_COMMIT_TYPE
from pymq.security.signing import Credentials, sign, signer
from pymq.testing import LocalCluster, capture_logs
from pymq.transport.client import RpcClient
from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, admin_account, write_acl
from tests.helpers import wait_until

pytestmark = pytest.mark.integration

ACL = acl_toml(
    admin_account("ops"),
    account("app", topic_perms={"orders": "PUB|SUB"}, default_group_perm="SUB"),
    account("reader", topic_perms={"orders": "SUB"}, default_group_perm="SUB"),
)
APP = {"access_key": "app", "secret_key": "app-secret"}
OPS = {"access_key": "ops", "secret_key": "ops-secret"}
FAST = {"rebalance_interval_seconds": 0.5, "heartbeat_interval_seconds": 0.5, "persist_offset_interval_seconds": 0.5}


def acl_settings(path: Path, **extra: object) -> dict[str, object]:
    return {"enable": True, "file": path, "reload_interval_seconds": 0.2, **extra}


@pytest.fixture
async def secured(tmp_path: Path):
    acl_file = write_acl(tmp_path / "acl.toml", ACL)
    broker_acl = acl_settings(acl_file, **BROKER_CREDENTIALS)
    async with LocalCluster(
        tmp_path / "c", brokers=1, namesrv={"acl": acl_settings(acl_file)}, broker={"acl": broker_acl}
    ) as c:
        async with AdminClient(c.namesrv_addr, **OPS) as admin:
            await wait_until(lambda: bool(c.namesrvs[0].registry.live), what="broker registered")
            await admin.create_topic("orders", queues=2)
        await c.wait_for_route("orders", 1)
        yield c, acl_file


async def test_signed_producer_push_pull_orderly_consumers_and_admin_succeed(secured) -> None:
    cluster, _ = secured
    ns = cluster.namesrv_addr
    async with Producer(ns, **APP) as producer:
        for i in range(6):
            await producer.send(Message("orders", f"m{i}".encode()))
    got: dict[str, set[bytes]] = {"push": set(), "orderly": set(), "pull": set()}

    push = PushConsumer(ns, "g-push", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **APP, **FAST)
    push.subscribe("orders", "*")
    push.register_listener(lambda msgs: got["push"].update(m.body for m in msgs))
    orderly = PushConsumer(ns, "g-orderly", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **APP, **FAST)
    orderly.subscribe("orders", "*")
    orderly.register_orderly_listener(lambda msgs: got["orderly"].update(m.body for m in msgs))
    pull = PullConsumer(ns, "g-pull", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **APP, **FAST)
    pull.subscribe("orders", "*")
    async with push, orderly, pull:
        deadline = time.monotonic() + 20
        while len(got["pull"]) < 6 and time.monotonic() < deadline:
            got["pull"].update(m.body for m in await pull.poll(timeout=0.5))
        await wait_until(lambda: all(len(v) == 6 for v in got.values()), timeout=20, what=f"all consumed: {got}")
        # a consumer's running info is the admin's (the broker asks the signed client over its connection)
        client_id = push.instance.client_id
        async with AdminClient(ns, **OPS) as admin:
            info = await admin.consumer_running_info("g-push", client_id, jstack=True)
            assert info["clientId"] == client_id and info["jstack"] and info["mqTable"]
        async with AdminClient(ns, **APP) as admin:
            with pytest.raises(NoPermissionError, match="admin permission required"):
                await admin.consumer_running_info("g-push", client_id)
    async with AdminClient(ns, **OPS) as admin:
        assert (await admin.topic_route("orders")).queueDatas
        assert sum(q["maxOffset"] for q in await admin.topic_status("orders")) == 6
        assert "g-push" in str(await admin.consumer_progress("g-push"))


async def raw_request(addr: str, frame: bytes) -> Command:
    """Write one encoded frame on a fresh plain socket and read one answer (what an attacker replays)."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(frame)
        await writer.drain()
        decoder = FrameDecoder()
        while True:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "connection closed without an answer"
            cmds = decoder.feed(data)
            if cmds:
                return cmds[0]
    finally:
        writer.close()


def send_request(topic: str = "orders") -> Command:
    record = encode_record(topic.encode(), b"captured", b"", born_timestamp=int(time.time() * 1000))
    cmd = Command.request(RequestCode.SEND_MESSAGE, SendMessageRequest(topic=topic, queue_id=0).to_ext(), record)
    cmd.opaque = 4242
    return cmd


async def test_unsigned_wrong_replayed_expired_and_underprivileged_requests_are_refused(secured) -> None:
    cluster, _ = secured
    broker = cluster.brokers[0].address
    ns = cluster.namesrv_addr

    # unsigned, on broker and nameserver
    answer = await raw_request(broker, encode_bytes(send_request()))
    assert (answer.code, answer.remark) == (ResponseCode.NO_PERMISSION, "request not signed")
    route = Command.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, TopicRequest(topic="orders").to_ext())
    answer = await raw_request(ns, encode_bytes(route))
    assert (answer.code, answer.remark) == (ResponseCode.NO_PERMISSION, "request not signed")

    # wrong secret: the same answer as an unknown key (nothing tells them apart)
    wrong = send_request()
    sign(wrong, Credentials("app", "not-the-secret"), time.time_ns() // 1_000_000)
    assert (await raw_request(broker, encode_bytes(wrong))).remark == "bad credentials"
    stranger = send_request()
    sign(stranger, Credentials("nobody", "whatever"), time.time_ns() // 1_000_000)
    assert (await raw_request(broker, encode_bytes(stranger))).remark == "bad credentials"

    # a captured, correctly signed request: served once, refused when replayed
    good = send_request()
    sign(good, Credentials(**APP), time.time_ns() // 1_000_000)
    frame = encode_bytes(good)
    assert (await raw_request(broker, frame)).code == ResponseCode.SUCCESS
    replay = await raw_request(broker, frame)
    assert (replay.code, replay.remark) == (ResponseCode.NO_PERMISSION, "replayed request")

    # expired: signed ten minutes ago
    old = send_request()
    sign(old, Credentials(**APP), time.time_ns() // 1_000_000 - 600_000)
    assert (await raw_request(broker, encode_bytes(old))).remark == "request timestamp outside the allowed window"

    # under-privileged, through the SDK: typed errors
    async with Producer(ns, access_key="reader", secret_key="reader-secret", retry_times=0) as p:
        with pytest.raises(NoPermissionError, match="no PUB permission on topic orders"):
            await p.send(Message("orders", b"x"))
    async with AdminClient(ns, **APP) as admin:
        with pytest.raises(NoPermissionError, match="admin permission required"):
            await admin.create_topic("other", queues=1)
    async with RpcClient(signer=signer(Credentials(**APP))) as rpc:
        resp = await rpc.invoke(ns, Command.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "secret"}))
        assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "no PUB or SUB permission on topic secret")
        # the nameserver's admin requests need admin
        resp = await rpc.invoke(ns, Command.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "orders"}))
        assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "admin permission required")
    assert cluster.brokers[0].acl.refused >= 7


def end_tx(group: str, half: SendResult, *, topic: str | None, commit_log_offset: int | None = None) -> Command:
    """A commit END_TRANSACTION for ``half``; without ``topic`` it is what a RocketMQ 4 client sends."""
    offset = half.commit_log_offsets[0] if commit_log_offset is None else commit_log_offset
    cmd = broker_api.end_transaction(
        group, half.queue_offset, offset, TRANSACTION_COMMIT_TYPE, msg_id=half.msg_id, topic=topic
    )
    assert ("topic" in cmd.ext) == (topic is not None)
    return cmd


def orders_stored(cluster: LocalCluster) -> int:
    store = cluster.brokers[0].store
    assert store is not None
    return sum(store.max_offset("orders", q) for q in range(2))


async def test_end_transaction_needs_pub_on_the_half_messages_topic(secured) -> None:
    """Only an account that may write the half message's topic can end it (RocketMQ 5 checks PUB on
    END_TRANSACTION's topic): a SUB-only account cannot commit it, with or without naming the topic
    (without one, the broker checks the topic of the half message the request names), and the SDK
    names it, so the producer's own commit goes through."""
    cluster, _ = secured
    broker = cluster.brokers[0]
    assert broker.acl is not None
    async with TransactionProducer(cluster.namesrv_addr, "tx-acl", lambda m: TransactionState.UNKNOWN, **APP) as tp:
        half = await tp.send_half(Message("orders", b"held"))
        async with RpcClient(signer=signer(Credentials("reader", "reader-secret"))) as rpc:
            # as a RocketMQ 4 client sends it (oneway, no topic): refused, counted and logged as other refusals
            refused = broker.acl.refused
            with capture_logs() as logs:
                await rpc.invoke_oneway(broker.address, end_tx("tx-acl", half, topic=None))
                await wait_until(lambda: broker.acl.refused == refused + 1, what="the oneway refusal")  # type: ignore[union-attr]
            assert [(r.get("event"), r.get("reason")) for r in logs if r.get("event", "").startswith("acl_")] == [
                ("acl_refused_permission", "no PUB permission on topic orders")
            ]
            for topic in ("orders", None):
                resp = await rpc.invoke(broker.address, end_tx("tx-acl", half, topic=topic))  # not oneway: seen
                assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "no PUB permission on topic orders")
        assert orders_stored(cluster) == 0
        assert broker.transaction.service().commits == 0
        await tp.end_transaction(half, TransactionState.COMMIT)
        await wait_until(lambda: orders_stored(cluster) == 1, what="the producer's own commit")


async def test_end_transaction_without_topic_commits_for_an_account_with_pub(secured) -> None:
    """A RocketMQ 4 client's END_TRANSACTION (oneway, no topic field) from an account with PUB on
    the half message's real topic commits it: the broker finds the topic from the half message."""
    cluster, _ = secured
    ns, broker = cluster.namesrv_addr, cluster.brokers[0]
    async with TransactionProducer(ns, "tx-v4", lambda m: TransactionState.UNKNOWN, **APP) as tp:
        half = await tp.send_half(Message("orders", b"from a RocketMQ 4 client"))
    async with RpcClient(signer=signer(Credentials("app", "app-secret"))) as rpc:
        await rpc.invoke_oneway(broker.address, end_tx("tx-v4", half, topic=None))
    got: list[bytes] = []
    pull = PullConsumer(ns, "g-v4", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **APP, **FAST)
    pull.subscribe("orders", "*")
    async with pull:
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got += [m.body for m in await pull.poll(timeout=0.5)]
    assert got == [b"from a RocketMQ 4 client"]
    assert broker.transaction.service().commits == 1


async def test_end_transaction_without_topic_naming_no_half_message_is_refused(secured) -> None:
    """Without a topic the broker must find the half message to check PUB on its topic: an offset
    naming none (nothing there, or a plain message, or another group's half) is refused with the
    reason, and the broker goes on serving (the real commit then goes through)."""
    cluster, _ = secured
    ns, broker = cluster.namesrv_addr, cluster.brokers[0]
    async with Producer(ns, **APP) as producer:
        plain = await producer.send(Message("orders", b"plain"))
    async with TransactionProducer(ns, "tx-lost", lambda m: TransactionState.UNKNOWN, **APP) as tp:
        half = await tp.send_half(Message("orders", b"held"))
    nowhere = 1 << 40
    not_there = f"no half message at commitlog offset {nowhere}"
    not_half = "is not the half message the request names"
    async with RpcClient(signer=signer(Credentials("app", "app-secret"))) as rpc:
        for cmd, remark in (
            (end_tx("tx-lost", half, topic=None, commit_log_offset=nowhere), not_there),
            (end_tx("tx-lost", half, topic=None, commit_log_offset=plain.commit_log_offsets[0]), not_half),
            (end_tx("someone-else", half, topic=None), not_half),
        ):
            resp = await rpc.invoke(broker.address, cmd)
            assert resp.code == ResponseCode.NO_PERMISSION and remark in (resp.remark or ""), resp.remark
        assert orders_stored(cluster) == 1  # only the plain message
        await rpc.invoke_oneway(broker.address, end_tx("tx-lost", half, topic=None))
    await wait_until(lambda: orders_stored(cluster) == 2, what="the commit after the refusals")
    async with Producer(ns, **APP) as producer:
        await producer.send(Message("orders", b"still serving"))
    assert orders_stored(cluster) == 3


async def test_acl_file_is_hot_reloaded_and_a_bad_one_keeps_the_rules(secured) -> None:
    cluster, acl_file = secured
    ns = cluster.namesrv_addr
    reader = {"access_key": "reader", "secret_key": "reader-secret", "retry_times": 0}
    with capture_logs() as logs:
        acl_file.write_text("accounts = [")  # broken: the old rules stay
        os.utime(acl_file, ns=(1, time.time_ns() + 1_000_000_000))
        failed = "acl_reload_failed_keeping_previous_rules"
        await wait_until(lambda: sum(r.get("event") == failed for r in logs) == 2, what="both daemons saw the bad file")
    async with Producer(ns, **reader) as p:
        with pytest.raises(NoPermissionError):
            await p.send(Message("orders", b"still refused"))
    acl_file.write_text(ACL.replace('orders = "SUB"', 'orders = "PUB|SUB"'))
    os.utime(acl_file, ns=(1, time.time_ns() + 2_000_000_000))
    await wait_until(lambda: cluster.brokers[0].acl.acl.accounts["reader"].topic_perm("orders") == 12, what="reload")
    async with Producer(ns, **reader) as p:
        await p.send(Message("orders", b"now allowed"))


async def test_broker_without_credentials_cannot_register(tmp_path: Path, secured) -> None:
    cluster, _ = secured
    await cluster.add_broker(1, acl={"enable": False})
    # registration is attempted at start: the nameserver refuses it
    await wait_until(lambda: cluster.namesrvs[0].acl.refused >= 1, what="registration refused")
    assert [info.broker_name for info in cluster.namesrvs[0].registry.live.values()] == ["broker-a"]


async def test_two_accounts_in_one_process_need_two_instance_names(secured) -> None:
    """A client instance signs as one account: a second account under the same client id is an error."""
    cluster, _ = secured
    ns = cluster.namesrv_addr
    async with Producer(ns, "p1", **APP) as p1:
        with pytest.raises(ConfigError, match="instance_name"):
            await Producer(ns, "p2", access_key="reader", secret_key="reader-secret").start()
        reader = {"access_key": "reader", "secret_key": "reader-secret", "retry_times": 0}
        async with Producer(ns, "p3", instance_name="as-reader", **reader) as p3:
            await p1.send(Message("orders", b"as app"))
            with pytest.raises(NoPermissionError):
                await p3.send(Message("orders", b"as reader"))


async def test_the_ha_link_needs_an_admin_account_when_acl_is_on(tmp_path: Path, secured) -> None:
    """The HA link has frames of its own: the slave signs its HELLO, the master checks it with its ACL."""
    cluster, acl_file = secured
    master = cluster.brokers[0]
    assert master.replication is not None and master.replication.master is not None
    ha_addr = master.replication.master.address

    def slave_acl(**creds: str) -> dict[str, object]:
        return acl_settings(acl_file, **creds)

    async with Producer(cluster.namesrv_addr, **APP) as p:
        await p.send(Message("orders", b"before the slaves"))

    with capture_logs() as logs:
        # No credentials (the HA address is given: resolving it through the master's port would be refused first).
        unsigned = await cluster.add_broker(
            0, broker_id=1, role="SLAVE", master_addr=master.address, ha_master_addr=ha_addr,
            acl=slave_acl(), store={"store_dir": str(tmp_path / "s1")},
        )  # fmt: skip
        # A signed HELLO of an account without admin.
        app_account = await cluster.add_broker(
            0, broker_id=2, role="SLAVE", master_addr=master.address, ha_master_addr=ha_addr,
            acl=slave_acl(**APP), store={"store_dir": str(tmp_path / "s2")},
        )  # fmt: skip
        await wait_until(
            lambda: len([e for e in logs if e["event"] == "slave_not_authorized"]) >= 2,
            timeout=15,
            what="both HELLOs refused",
        )
    reasons = sorted(str(e.get("reason")) for e in logs if e["event"] == "slave_not_authorized")
    assert any("needs ACL credentials" in r for r in reasons) and any("admin permission required" in r for r in reasons)
    for s in (unsigned, app_account):
        assert s.store is not None and s.store.commitlog.max_offset == 0  # nothing replicated
    # The broker's own (admin) account replicates.
    admitted = await cluster.add_broker(
        0, broker_id=3, role="SLAVE", master_addr=master.address,
        acl=slave_acl(access_key="broker", secret_key="broker-secret"), store={"store_dir": str(tmp_path / "s3")},
    )  # fmt: skip
    async with Producer(cluster.namesrv_addr, **APP) as p:
        await p.send(Message("orders", b"replicated"))
    assert master.store is not None
    await wait_until(
        lambda: admitted.store is not None and admitted.store.commitlog.max_offset == master.store.commitlog.max_offset,
        timeout=15,
        what="the admitted slave caught up",
    )
