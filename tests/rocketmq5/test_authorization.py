"""ACL on the gRPC front end: 5.x clients' ``authorization`` headers (MQv2-HMAC-SHA1 over
x-mq-date-time) checked against pymq's ACL accounts; UNAUTHORIZED for bad credentials,
FORBIDDEN for a missing permission."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from pymq.client.admin import AdminClient
from pymq.grpc_proxy import GrpcProxy
from pymq.grpc_proxy.auth import sign
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.pb.service_pb2_grpc import MessagingServiceStub
from pymq.grpc_proxy.settings import ProxySettings
from pymq.testing import LocalCluster
from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, admin_account, write_acl
from tests.helpers import wait_until, wait_until_async
from tests.rocketmq5.conftest import FAST_REVIVE, consumers_of, lingering, producers_of, run_client

pytestmark = pytest.mark.integration

ACL = """
[[accounts]]
access_key = "app"
secret_key = "app-secret-1"
topic_perms = { t5 = "PUB|SUB" }
group_perms = { g-acl = "SUB" }

[[accounts]]
access_key = "reader"
secret_key = "reader-secret"
topic_perms = { t5 = "SUB" }
group_perms = { g-acl = "SUB" }
"""


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, GrpcProxy]]:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    async with LocalCluster(tmp_path / "c", brokers=1, broker=FAST_REVIVE) as c:
        await c.create_topic("t5", 4)
        settings = ProxySettings(long_polling_ms=2000)
        async with GrpcProxy(c.namesrv_addr, port=0, settings=settings, acl_file=acl) as proxy:
            yield c, proxy


async def test_signed_5x_clients_produce_and_consume(
    guarded: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    _, proxy = guarded
    endpoint = f"127.0.0.1:{proxy.port}"
    app = {"ak": "app", "sk": "app-secret-1"}
    sent = await run_client(
        rocketmq5_python,
        "produce.py",
        {"endpoint": endpoint, "topic": "t5", "messages": [{"body": "one"}, {"body": "two"}], **app},
    )
    assert all("message_id" in r for r in sent), sent
    got = await run_client(
        rocketmq5_python,
        "consume.py",
        {"endpoint": endpoint, "group": "g-acl", "topic": "t5", "count": 2, "deadline_s": 15, **app},
    )
    assert sorted(m["body"] for m in got["messages"]) == ["one", "two"] and not got["errors"], got


async def test_bad_credentials_are_unauthorized_and_missing_rights_forbidden(
    guarded: tuple[LocalCluster, GrpcProxy], rocketmq5_python: Path
) -> None:
    _, proxy = guarded
    endpoint = f"127.0.0.1:{proxy.port}"
    one = [{"body": "x"}]
    acl = proxy.acl
    assert acl is not None
    for creds in ({"ak": "app", "sk": "wrong-secret"}, {"ak": "nobody", "sk": "whatever1"}, {}):
        before = dict(acl.refusals)
        out = await run_client(
            rocketmq5_python, "produce.py", {"endpoint": endpoint, "topic": "t5", "messages": one, **creds}
        )
        # the client reports its failed route fetch, not the code: the front end's count says why
        assert isinstance(out, list) and "message_id" not in out[0], (creds, out)
        assert acl.refusals[pb.UNAUTHORIZED] > before.get(pb.UNAUTHORIZED, 0), (creds, acl.refusals)
        assert acl.refusals[pb.FORBIDDEN] == before.get(pb.FORBIDDEN, 0), (creds, acl.refusals)
    # "reader" may read t5 (so its route and start are fine) but not publish to it
    out = await run_client(
        rocketmq5_python,
        "produce.py",
        {"endpoint": endpoint, "topic": "t5", "messages": one, "ak": "reader", "sk": "reader-secret"},
    )
    assert isinstance(out, list) and str(pb.FORBIDDEN) in out[0]["error"], out
    assert "no PUB permission on topic t5" in out[0]["error"], out


async def test_each_call_is_checked_with_its_own_headers(guarded: tuple[LocalCluster, GrpcProxy]) -> None:
    _, proxy = guarded

    def headers(ak: str, sk: str, date_time: str | None = None) -> list[tuple[str, str]]:
        dt = date_time or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign(sk, dt)}"
        return [("x-mq-date-time", dt), ("authorization", auth)]

    route = spb.QueryRouteRequest(topic=pb.Resource(name="t5"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
        stub = MessagingServiceStub(channel)
        unsigned = await stub.QueryRoute(route, timeout=5)
        assert unsigned.status.code == pb.UNAUTHORIZED and "not signed" in unsigned.status.message
        wrong = await stub.QueryRoute(route, metadata=headers("app", "nope-secret"), timeout=5)
        unknown = await stub.QueryRoute(route, metadata=headers("ghost", "app-secret-1"), timeout=5)
        # the same answer whether the key is unknown or the secret wrong
        assert (wrong.status.code, wrong.status.message) == (pb.UNAUTHORIZED, "bad credentials")
        assert (unknown.status.code, unknown.status.message) == (pb.UNAUTHORIZED, "bad credentials")
        # a signature over another date-time than the header's
        moved = headers("app", "app-secret-1", "20260101T000000Z")
        moved[0] = ("x-mq-date-time", "20260101T000001Z")
        assert (await stub.QueryRoute(route, metadata=moved, timeout=5)).status.code == pb.UNAUTHORIZED
        ok = await stub.QueryRoute(route, metadata=headers("app", "app-secret-1"), timeout=5)
        assert ok.status.code == pb.OK and len(ok.message_queues) == 4
        # a rightly signed date an hour old: outside the window (a captured signature's lifetime)
        old = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 3600))
        stale = await stub.QueryRoute(route, metadata=headers("app", "app-secret-1", old), timeout=5)
        assert stale.status.code == pb.UNAUTHORIZED and "from the front end's clock" in stale.status.message
        garbled = await stub.QueryRoute(route, metadata=headers("app", "app-secret-1", "yesterday"), timeout=5)
        assert garbled.status.code == pb.UNAUTHORIZED and "is not yyyyMMddTHHmmssZ" in garbled.status.message
        other_topic = spb.QueryRouteRequest(topic=pb.Resource(name="secret-topic"))
        denied = await stub.QueryRoute(other_topic, metadata=headers("app", "app-secret-1"), timeout=5)
        assert denied.status.code == pb.FORBIDDEN and "topic secret-topic" in denied.status.message
        receive = spb.ReceiveMessageRequest(
            group=pb.Resource(name="other-group"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="t5")),
            batch_size=1,
        )
        answers = [r async for r in stub.ReceiveMessage(receive, metadata=headers("app", "app-secret-1"), timeout=5)]
        assert [(r.status.code, r.status.message) for r in answers] == [
            (pb.FORBIDDEN, "no SUB permission on group other-group")
        ]
        telemetry = stub.Telemetry(metadata=headers("app", "bad-secret-1"), timeout=5)
        await telemetry.write(spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
        first = await telemetry.read()
        assert first.status.code == pb.UNAUTHORIZED
        telemetry.cancel()
    assert proxy.acl is not None and proxy.acl.refusals[pb.UNAUTHORIZED] >= 5


async def test_acl_cluster_end_to_end_the_front_end_signs_with_its_own_account(
    tmp_path: Path, rocketmq5_python: Path
) -> None:
    """Brokers and nameserver with ACL too: the front end's own calls (routes, sends, pops, acks, the
    clients' heartbeats, topic attributes) are signed with its account; its clients with theirs."""
    acl_file = write_acl(
        tmp_path / "acl.toml",
        acl_toml(
            admin_account("proxy"),
            account("app", topic_perms={"t-sec": "PUB|SUB"}, group_perms={"g-sec": "SUB"}),
        ),
    )
    acl = {"enable": True, "file": acl_file, "reload_interval_seconds": 0.2}
    async with LocalCluster(
        tmp_path / "c", brokers=1, namesrv={"acl": acl}, broker={"acl": {**acl, **BROKER_CREDENTIALS}}
    ) as c:
        await wait_until(lambda: bool(c.namesrvs[0].registry.live), what="broker registered")
        async with AdminClient(c.namesrv_addr, **BROKER_CREDENTIALS) as admin:
            await admin.create_topic("t-sec", queues=2)
            await c.wait_for_route("t-sec", 1)
            async with GrpcProxy(
                c.namesrv_addr,
                port=0,
                settings=ProxySettings(long_polling_ms=2000),
                acl_file=acl_file,
                access_key="proxy",
                secret_key="proxy-secret",
            ) as proxy:
                endpoint = f"127.0.0.1:{proxy.port}"
                app = {"ak": "app", "sk": "app-secret"}
                spec = {"endpoint": endpoint, "topic": "t-sec", "messages": [{"body": "secured"}], **app}
                sent = await run_client(rocketmq5_python, "produce.py", spec)
                assert "message_id" in sent[0], sent
                args = {"endpoint": endpoint, "group": "g-sec", "topic": "t-sec", "count": 1, **app}
                got = await run_client(rocketmq5_python, "consume.py", args)
                assert [m["body"] for m in got["messages"]] == ["secured"] and not got["errors"], got
                async with lingering(rocketmq5_python, proxy, "g-sec", "t-sec", **app) as (_, ids):
                    await wait_until_async(
                        lambda: _listed(consumers_of(admin, "g-sec"), ids["consumer"]), timeout=15, what="consumer"
                    )
                    await wait_until_async(
                        lambda: _listed(producers_of(admin, "t-sec"), ids["producer"]), timeout=15, what="producer"
                    )
                assert proxy.acl is not None and proxy.acl.refusals == {}


async def _listed(rows: Any, client_id: str) -> bool:
    return any(r["clientId"] == client_id and r["protocol"] == "grpc" for r in await rows)
