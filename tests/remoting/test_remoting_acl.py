"""ACL for RocketMQ 4.x clients: AclClientRPCHook signatures checked against pymq's accounts, on both daemons."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from pymq.remoting.command import RemotingCommand, decode_frame, encode
from pymq.security.remoting_signing import sign
from pymq.testing import LocalCluster
from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, admin_account, write_acl

pytestmark = pytest.mark.integration

ACL = acl_toml(
    admin_account("ops"),
    account("app", topic_perms={"orders": "PUB|SUB"}, default_group_perm="SUB"),
    account("reader", topic_perms={"orders": "SUB"}, default_group_perm="SUB"),
)


def _acl(path: Path, **extra: object) -> dict[str, object]:
    return {"enable": True, "file": path, "reload_interval_seconds": 0.2, **extra}


async def _ask(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(encode(cmd))
        while True:  # the answer; a request the broker pushes meanwhile (NOTIFY_CONSUMER_IDS_CHANGED) is skipped
            (n,) = struct.unpack(">i", await reader.readexactly(4))
            frame = decode_frame(struct.pack(">i", n) + await reader.readexactly(n))
            if frame.is_response:
                return frame
    finally:
        writer.close()


def _signed(code: int, ext: dict[str, str], ak: str, sk: str, body: bytes = b"") -> RemotingCommand:
    ext = {**ext, "AccessKey": ak, "OnsChannel": "ALIYUN"}  # as the C++ client signs
    ext["Signature"] = sign(ext, body, sk)
    return RemotingCommand(code=code, ext_fields=ext, body=body)


@pytest.fixture
async def secured(tmp_path: Path):
    acl_file = write_acl(tmp_path / "acl.toml", ACL)
    async with LocalCluster(
        tmp_path / "c",
        brokers=1,
        namesrv={"acl": _acl(acl_file)},
        broker={"acl": _acl(acl_file, **BROKER_CREDENTIALS)},
    ) as c:
        await c.create_topic("orders", queues=2)
        await c.wait_for_route("orders", 1)
        yield c


async def test_nameserver_answers_a_signed_route_query_and_refuses_unsigned_and_forged_ones(secured) -> None:
    ns = secured.namesrv_addr
    ok = await _ask(ns, _signed(105, {"topic": "orders"}, "app", "app-secret"))
    assert ok.code == 0 and b"queueDatas" in ok.body
    unsigned = await _ask(ns, RemotingCommand(code=105, ext_fields={"topic": "orders"}))
    assert (unsigned.code, unsigned.remark) == (16, "request not signed")
    forged = await _ask(ns, _signed(105, {"topic": "orders"}, "app", "wrong-secret"))
    assert (forged.code, forged.remark) == (16, "bad credentials")
    unknown = await _ask(ns, _signed(105, {"topic": "orders"}, "nobody", "x"))
    assert (unknown.code, unknown.remark) == (16, "bad credentials")


async def test_broker_checks_the_signature_then_the_accounts_permissions_on_the_translated_request(secured) -> None:
    broker = secured.brokers[0].address
    group = {"consumerGroup": "g1"}
    listed = await _ask(broker, _signed(38, group, "app", "app-secret"))
    # signed and permitted: the handler's own answer (no consumer of g1 yet)
    assert (listed.code, listed.remark) == (1, "no consumer of group g1 is connected")
    forged = await _ask(broker, _signed(38, group, "app", "wrong-secret"))
    assert (forged.code, forged.remark) == (16, "bad credentials")
    unsigned = await _ask(broker, RemotingCommand(code=38, ext_fields=group))
    assert (unsigned.code, unsigned.remark) == (16, "request not signed")
    body = b'{"clientID":"c1","producerDataSet":[],"consumerDataSet":[{"groupName":"g1","subscriptionDataSet":[]}]}'
    beat = await _ask(broker, _signed(34, {}, "app", "app-secret", body))
    assert beat.code == 0, beat.remark
    tampered = _signed(34, {}, "app", "app-secret", body)
    tampered.body = body.replace(b"c1", b"c2")
    refused = await _ask(broker, tampered)
    assert (refused.code, refused.remark) == (16, "bad credentials")
