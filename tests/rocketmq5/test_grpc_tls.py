"""TLS on the gRPC front end's port, with the listener certificates of the daemons' [tls] settings."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from pymq.config import TlsSettings
from pymq.errors import ConfigError
from pymq.grpc_proxy import GrpcProxy
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.pb.service_pb2_grpc import MessagingServiceStub
from pymq.testing import LocalCluster
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("grpc-certs"))


async def test_the_port_serves_tls_and_refuses_plaintext_and_untrusted_clients(tmp_path: Path, certs: Certs) -> None:
    tls = TlsSettings(enable=True, cert_file=certs.server_cert, key_file=certs.server_key)
    route = spb.QueryRouteRequest(topic=pb.Resource(name="tt"))
    async with LocalCluster(tmp_path / "c", brokers=1) as c:
        await c.create_topic("tt", 2)
        await c.wait_for_route("tt", 1)
        async with GrpcProxy(c.namesrv_addr, port=0, tls=tls) as proxy:
            addr = f"127.0.0.1:{proxy.port}"
            trusted = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
            async with grpc.aio.secure_channel(addr, trusted) as channel:
                ok = await MessagingServiceStub(channel).QueryRoute(route, timeout=10)
            assert ok.status.code == pb.OK and len(ok.message_queues) == 2
            async with grpc.aio.insecure_channel(addr) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as plain:
                    await MessagingServiceStub(channel).QueryRoute(route, timeout=3)
            assert plain.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            untrusted = grpc.ssl_channel_credentials(root_certificates=certs.other_ca.read_bytes())
            async with grpc.aio.secure_channel(addr, untrusted) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await MessagingServiceStub(channel).QueryRoute(route, timeout=3)
            assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


async def test_mutual_tls_needs_a_client_certificate(tmp_path: Path, certs: Certs) -> None:
    tls = TlsSettings(
        enable=True, cert_file=certs.server_cert, key_file=certs.server_key, ca_file=certs.ca, verify_client=True
    )
    route = spb.QueryRouteRequest(topic=pb.Resource(name="tt"))
    async with LocalCluster(tmp_path / "c", brokers=1) as c:
        await c.create_topic("tt", 2)
        await c.wait_for_route("tt", 1)
        async with GrpcProxy(c.namesrv_addr, port=0, tls=tls) as proxy:
            addr = f"127.0.0.1:{proxy.port}"
            ca = certs.ca.read_bytes()
            with_cert = grpc.ssl_channel_credentials(
                root_certificates=ca,
                private_key=certs.client_key.read_bytes(),
                certificate_chain=certs.client_cert.read_bytes(),
            )
            async with grpc.aio.secure_channel(addr, with_cert) as channel:
                ok = await MessagingServiceStub(channel).QueryRoute(route, timeout=10)
            assert ok.status.code == pb.OK
            async with grpc.aio.secure_channel(addr, grpc.ssl_channel_credentials(root_certificates=ca)) as channel:
                with pytest.raises(grpc.aio.AioRpcError):
                    await MessagingServiceStub(channel).QueryRoute(route, timeout=3)


def test_an_unreadable_certificate_is_a_config_error(tmp_path: Path) -> None:
    tls = TlsSettings(enable=True, cert_file=tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match="cannot read a TLS file of the gRPC port"):
        GrpcProxy("127.0.0.1:9876", port=0, tls=tls)
