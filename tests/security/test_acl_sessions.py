"""ACL sessions (pymq.security.session): a TLS connection proves its account once, then its requests
go unsigned; a session is never opened on plaintext, never moves to another connection, ends when
the account's key changes, and every request's permissions are still checked."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.errors import NoPermissionError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.frame import FrameDecoder, encode_bytes
from pymq.protocol.record import encode_record
from pymq.protocol.requests import SendMessageRequest
from pymq.security.session import CHALLENGE, SESSION_ATTR
from pymq.security.signing import Credentials, sign
from pymq.testing import LocalCluster
from pymq.transport.tls import client_context
from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, admin_account, write_acl
from tests.helpers import wait_until
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.integration

APP = {"access_key": "app", "secret_key": "app-secret"}
OPS = {"access_key": "ops", "secret_key": "ops-secret"}


def acl_text(app_secret: str = "app-secret") -> str:
    return acl_toml(
        admin_account("ops"),
        account("app", app_secret, topic_perms={"orders": "PUB|SUB"}, default_group_perm="SUB"),
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


async def secured_cluster(work: Path, certs: Certs | None) -> LocalCluster:
    """Nameserver and broker enforcing ACL; TLS-only listeners when ``certs``; topics orders and secret."""
    acl = {"enable": True, "file": write_acl(work / "acl.toml", acl_text()), "reload_interval_seconds": 3600}
    tls: dict[str, object] = {}
    if certs is not None:
        tls = {"enable": True, "cert_file": certs.server_cert, "key_file": certs.server_key, "ca_file": certs.ca}
    cluster = LocalCluster(
        work / "c",
        namesrv={"acl": acl, "tls": tls},
        broker={"acl": {**acl, **BROKER_CREDENTIALS}, "tls": {**tls, "client": True} if tls else {}},
    )
    await cluster.start()
    await wait_until(lambda: bool(cluster.namesrvs[0].registry.live), what="broker registered")
    from pymq.client.admin import AdminClient

    opts = {"tls": True, "tls_ca_file": str(certs.ca)} if certs is not None else {}
    async with AdminClient(cluster.namesrv_addr, **OPS, **opts) as admin:
        for topic in ("orders", "secret"):
            await admin.create_topic(topic, queues=1)
    for topic in ("orders", "secret"):
        await cluster.wait_for_route(topic, 1)
    return cluster


def send(topic: str) -> Command:
    record = encode_record(topic.encode(), b"unsigned", b"", born_timestamp=int(time.time() * 1000))
    return Command.request(RequestCode.SEND_MESSAGE, SendMessageRequest(topic=topic, queue_id=0).to_ext(), record)


def signed(cmd: Command, opaque: int, creds: Credentials = Credentials(**APP), age_ms: int = 0) -> bytes:
    cmd.opaque = opaque
    sign(cmd, creds, time.time_ns() // 1_000_000 - age_ms)
    return encode_bytes(cmd)


class RawConnection:
    """One connection written frame by frame (what an attacker with captured bytes does)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, FrameDecoder()
        self.opaque = 100

    @classmethod
    async def open(cls, addr: str, tls: ssl.SSLContext | None) -> RawConnection:
        host, port = addr.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port), ssl=tls))

    async def ask(self, frame: bytes) -> Command | None:
        """The answer to ``frame``; None when the server closed the connection instead."""
        self.writer.write(frame)
        await self.writer.drain()
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), 10)
            if not data:
                return None
            cmds = self.decoder.feed(data)
            if cmds:
                return cmds[0]

    async def unsigned(self, cmd: Command) -> Command | None:
        self.opaque += 1
        cmd.opaque = self.opaque
        return await self.ask(encode_bytes(cmd))

    async def challenge(self) -> str:
        answer = await self.unsigned(Command.request(RequestCode.SESSION_CHALLENGE))
        assert answer is not None and answer.code == ResponseCode.SUCCESS, answer
        return str(answer.ext[CHALLENGE])

    def close(self) -> None:
        self.writer.close()


async def test_the_sdk_opens_a_session_per_tls_connection_and_permissions_still_hold(
    tmp_path: Path, certs: Certs
) -> None:
    cluster = await secured_cluster(tmp_path, certs)
    try:
        async with Producer(cluster.namesrv_addr, "g", tls=True, tls_ca_file=str(certs.ca), retry_times=0, **APP) as p:
            assert (await p.send(Message("orders", b"in session"))).queue_offset == 0
            assert p.instance is not None
            conns = list(p.instance.rpc._conns.values())
            assert len(conns) == 2 and all(c.tls and c.signer is None for c in conns)  # nameserver and broker
            served = [c.attrs.get(SESSION_ATTR) for c in cluster.brokers[0].server.connections]
            assert [s.access_key for s in served if s is not None] == ["app"]
            # unsigned now, but each request's permissions are still checked
            with pytest.raises(NoPermissionError, match="permission on topic secret"):  # (the route, in session)
                await p.send(Message("secret", b"x"))
        # per-request signing stays available (and is what RocketMQ's clients do)
        opts = {"tls": True, "tls_ca_file": str(certs.ca), "acl_sessions": False, **APP}
        async with Producer(cluster.namesrv_addr, "g2", **opts) as p:
            assert (await p.send(Message("orders", b"signed"))).queue_offset == 1
            assert p.instance is not None
            assert all(c.signer is not None for c in p.instance.rpc._conns.values())
    finally:
        await cluster.close()


async def test_a_session_is_bound_to_its_connection_and_ends_when_the_key_changes(tmp_path: Path, certs: Certs) -> None:
    cluster = await secured_cluster(tmp_path, certs)
    broker = cluster.brokers[0].address
    ctx = client_context(ca_file=certs.ca)
    a = await RawConnection.open(broker, ctx)
    b = await RawConnection.open(broker, ctx)
    try:
        c1 = await a.challenge()
        await b.challenge()
        # A's signed open, sent on B: refused (B was given another challenge); B stays unauthenticated
        frame = signed(Command.request(RequestCode.SESSION_OPEN, {CHALLENGE: c1}), 1)
        moved = await b.ask(frame)
        assert moved is not None
        not_issued = "session challenge not issued on this connection"
        assert (moved.code, moved.remark) == (ResponseCode.NO_PERMISSION, not_issued)
        refused = await b.unsigned(send("orders"))
        assert refused is not None and refused.remark == "request not signed"
        # the same bytes on A: a replay
        replayed = await a.ask(frame)
        assert replayed is not None and replayed.remark == "replayed request"
        # stale: signed ten minutes ago
        old = await a.ask(signed(Command.request(RequestCode.SESSION_OPEN, {CHALLENGE: c1}), 2, age_ms=600_000))
        assert old is not None and old.remark == "request timestamp outside the allowed window"
        # a fresh open with A's challenge: A is the app's from now on, unsigned
        opened = await a.ask(signed(Command.request(RequestCode.SESSION_OPEN, {CHALLENGE: c1}), 3))
        assert opened is not None and opened.code == ResponseCode.SUCCESS
        stored = await a.unsigned(send("orders"))
        assert stored is not None and stored.code == ResponseCode.SUCCESS
        denied = await a.unsigned(send("secret"))
        assert denied is not None and denied.remark == "no PUB permission on topic secret"
        # the challenge was used up
        again = await a.ask(signed(Command.request(RequestCode.SESSION_OPEN, {CHALLENGE: c1}), 4))
        assert again is not None and again.remark == not_issued
        # the account's secret key changes: the session's next request closes the connection
        write_acl(tmp_path / "acl.toml", acl_text("new-secret"))
        assert cluster.brokers[0].acl.reload_now(force=True)
        assert await a.unsigned(send("orders")) is None
    finally:
        a.close()
        b.close()
        await cluster.close()


async def test_a_plaintext_connection_cannot_open_a_session(tmp_path: Path) -> None:
    cluster = await secured_cluster(tmp_path, None)
    conn = await RawConnection.open(cluster.brokers[0].address, None)
    try:
        answer = await conn.unsigned(Command.request(RequestCode.SESSION_CHALLENGE))
        assert answer is not None and answer.remark == "sessions need a TLS connection"
        opened = await conn.ask(signed(Command.request(RequestCode.SESSION_OPEN, {CHALLENGE: "00" * 16}), 1))
        assert opened is not None and opened.remark == "sessions need a TLS connection"
        refused = await conn.unsigned(send("orders"))
        assert refused is not None and refused.remark == "request not signed"
        # the SDK over plaintext signs every request
        async with Producer(cluster.namesrv_addr, "g", **APP) as p:
            assert (await p.send(Message("orders", b"signed"))).queue_offset == 0
            assert p.instance is not None
            assert all(not c.tls and c.signer is not None for c in p.instance.rpc._conns.values())
    finally:
        conn.close()
        await cluster.close()
