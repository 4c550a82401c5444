"""TLS through the real daemons: mutual TLS round trips (SDK and pymq-admin), ACL over TLS, and
clean failures: plaintext to a TLS port, an untrusted CA, no client certificate, TLS to a plaintext port."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer
from pymq.errors import ConnectError, ConnectionClosedError, NoPermissionError, TransportError
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from pymq.transport.tls import client_context
from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, write_acl
from tests.helpers import wait_until
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.integration

ACL = acl_toml(account("app", admin=True, default_topic_perm="PUB|SUB", default_group_perm="SUB"))
APP = {"access_key": "app", "secret_key": "app-secret"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[tuple[str, str, Certs]]:
    """A nameserver and a broker as processes: mutual TLS on both listeners, ACL on both."""
    work = tmp_path_factory.mktemp("tls-cluster")
    acl = write_acl(work / "acl.toml", ACL)
    env = {
        "PYMQ_TLS__ENABLE": "true",
        "PYMQ_TLS__CERT_FILE": str(certs.server_cert),
        "PYMQ_TLS__KEY_FILE": str(certs.server_key),
        "PYMQ_TLS__CA_FILE": str(certs.ca),
        "PYMQ_TLS__VERIFY_CLIENT": "true",
        "PYMQ_ACL__ENABLE": "true",
        "PYMQ_ACL__FILE": str(acl),
    }
    broker_env = {
        **env,
        "PYMQ_TLS__CLIENT_CERT_FILE": str(certs.client_cert),
        "PYMQ_TLS__CLIENT_KEY_FILE": str(certs.client_key),
        "PYMQ_ACL__ACCESS_KEY": BROKER_CREDENTIALS["access_key"],
        "PYMQ_ACL__SECRET_KEY": BROKER_CREDENTIALS["secret_key"],
    }
    procs: list[DaemonProcess] = []
    try:
        ns = namesrv_process(work, env=env).start()
        procs.append(ns)
        broker = broker_process(work, f"tls://{ns.address}", "broker-a", env=broker_env).start()
        procs.append(broker)
        yield ns.address, broker.address, certs
    finally:
        for p in reversed(procs):
            p.stop()


def tls_options(certs: Certs) -> dict[str, object]:
    return {
        "tls_ca_file": str(certs.ca),
        "tls_cert_file": str(certs.client_cert),
        "tls_key_file": str(certs.client_key),
    }


def admin(ns: str, certs: Certs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "pymq.cli.admin", "--namesrv", f"tls://{ns}", "--tls-ca-file", str(certs.ca),
            "--tls-cert-file", str(certs.client_cert), "--tls-key-file", str(certs.client_key),
            "--access-key", "app", "--secret-key", "app-secret", *args,
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def test_mutual_tls_round_trip_with_acl_through_real_daemons(tls_cluster) -> None:
    ns, _broker, certs = tls_cluster
    out = admin(ns, certs, "topic-create", "--topic", "secure", "--queues", "2")
    assert out.returncode == 0, out.stderr
    options = {**tls_options(certs), **APP}
    async with Producer(f"tls://{ns}", **options) as producer:
        deadline = time.monotonic() + 20
        while True:  # the broker registers the new topic asynchronously
            try:
                for i in range(5):
                    await producer.send(Message("secure", f"m{i}".encode()))
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await producer.instance.update_route("secure")
    consumer = PullConsumer(f"tls://{ns}", "g-tls", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **options)
    consumer.subscribe("secure", "*")
    got: set[bytes] = set()
    async with consumer:
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            got.update(m.body for m in await consumer.poll(timeout=0.5))
    assert got == {f"m{i}".encode() for i in range(5)}
    out = admin(ns, certs, "--json", "topic-route", "--topic", "secure")
    assert out.returncode == 0 and "broker-a" in out.stdout, out.stderr
    # over TLS, the ACL still applies: unsigned requests are refused
    async with Producer(f"tls://{ns}", retry_times=0, **tls_options(certs)) as unsigned:
        with pytest.raises(NoPermissionError, match="request not signed"):
            await unsigned.send(Message("secure", b"x"))


async def test_plaintext_client_to_a_tls_port_fails_quickly_and_says_why(tls_cluster) -> None:
    ns, broker, _certs = tls_cluster
    for addr in (ns, broker):
        started = time.monotonic()
        async with RpcClient(connect_timeout=5) as rpc:
            with pytest.raises(ConnectionClosedError, match="TLS port reached without TLS"):
                await rpc.invoke(addr, Command.request(RequestCode.PING), timeout=20)
        assert time.monotonic() - started < 10  # an answer, not a hang until the timeout


async def test_untrusted_server_certificate_is_refused(tls_cluster) -> None:
    ns, _broker, certs = tls_cluster
    ctx = client_context(ca_file=certs.other_ca, cert_file=certs.client_cert, key_file=certs.client_key)
    async with RpcClient(ssl=ctx) as rpc:
        with pytest.raises(ConnectError, match=r"TLS handshake with .* failed: CERTIFICATE_VERIFY_FAILED"):
            await rpc.invoke(ns, Command.request(RequestCode.PING))


async def test_client_without_certificate_is_refused_when_the_server_requires_one(tls_cluster) -> None:
    ns, _broker, certs = tls_cluster
    async with RpcClient(ssl=client_context(ca_file=certs.ca)) as rpc:
        with pytest.raises(TransportError) as err:
            await rpc.invoke(ns, Command.request(RequestCode.PING), timeout=10)
        assert "certificate" in str(err.value)


async def test_tls_client_to_a_plaintext_port_fails_cleanly(cluster, certs: Certs) -> None:
    async with RpcClient(ssl=client_context(ca_file=certs.ca), connect_timeout=5) as rpc:
        started = time.monotonic()
        with pytest.raises(ConnectError, match=r"cannot connect|TLS handshake"):
            await rpc.invoke(cluster.namesrv_addr, Command.request(RequestCode.PING))
        assert time.monotonic() - started < 10


async def test_in_process_tls_listener_and_tls_scheme_addresses(tmp_path: Path, certs: Certs) -> None:
    """LocalCluster with TLS: a client naming tls://host:port reaches nameserver and broker over TLS."""
    from pymq.testing import LocalCluster

    tls = {"enable": True, "cert_file": certs.server_cert, "key_file": certs.server_key, "ca_file": certs.ca}
    async with LocalCluster(tmp_path / "c", namesrv={"tls": tls}, broker={"tls": {**tls, "client": True}}) as c:
        await c.create_topic("t", 1)
        await c.wait_for_route("t", 1)
        async with Producer(f"tls://{c.namesrv_addr}", tls_ca_file=str(certs.ca)) as p:
            r = await p.send(Message("t", b"over tls"))
        assert r.queue_offset == 0
        await wait_until(lambda: all(conn.transport.get_extra_info("ssl_object") is not None
                                     for conn in c.brokers[0].server.connections), what="tls connections")  # fmt: skip
        async with RpcClient() as rpc:  # the same broker refuses plaintext
            with pytest.raises(ConnectionClosedError):
                await rpc.invoke(c.brokers[0].address, Command.request(RequestCode.PING), timeout=10)


async def test_metrics_endpoint_over_https(tmp_path: Path, certs: Certs) -> None:
    """[tls] metrics: the metrics endpoint serves HTTPS with the listener's certificate."""
    import ssl
    import urllib.request

    from pymq.config import NamesrvConfig
    from pymq.nameserver.app import NamesrvApp

    tls = {"enable": True, "metrics": True, "cert_file": certs.server_cert, "key_file": certs.server_key}
    async with NamesrvApp(NamesrvConfig(host="127.0.0.1", port=0, metrics_port=0, tls=tls)) as ns:
        url = ns.metrics.url
        assert url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(certs.ca))

        def get() -> bytes:
            with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
                return bytes(r.read())

        assert b"pymq_" in await asyncio.to_thread(get)


async def test_a_stalled_tls_handshake_is_dropped(certs: Certs) -> None:
    """A peer that opens a TCP connection to a TLS listener and never says hello does not hold it."""
    from pymq.transport.dispatch import Dispatcher
    from pymq.transport.server import RpcServer
    from pymq.transport.tls import server_context

    server = RpcServer(Dispatcher(), ssl=server_context(certs.server_cert, certs.server_key), tls_handshake_timeout=0.5)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server
        assert time.monotonic() - started < 5
        writer.close()
    finally:
        await server.close()
