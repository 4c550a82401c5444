"""The gRPC front end's lifecycle: a pymq producer (its client instance finds the brokers) and a grpc.aio server."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from pymq.client.producer import Producer
from pymq.errors import ConfigError
from pymq.grpc_proxy.auth import DEFAULT_DATE_WINDOW_SECONDS, GrpcAcl
from pymq.grpc_proxy.service import MessagingService, add_to_server
from pymq.grpc_proxy.settings import ProxySettings
from pymq.protocol.message import MessageExt
from pymq.protocol.requests import CheckTransactionStateRequest
from pymq.security.acl import AclFileError
from pymq.transport.server import bind_socket, cannot_listen

if TYPE_CHECKING:
    from pymq.config import TlsSettings

log = logging.getLogger("pymq.grpc_proxy")


class ProxyProducer(Producer):
    """The front end's producer: half messages are sent in its group, so the brokers' check-backs come
    here (through the client instance) and go on to ``on_check``."""

    on_check: Callable[[str, CheckTransactionStateRequest, MessageExt], None] | None = None

    def check_transaction_state(self, broker_addr: str, header: CheckTransactionStateRequest, msg: MessageExt) -> None:
        if self.on_check is not None:
            self.on_check(broker_addr, header, msg)


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """grpc's TLS for the port from ``[tls]``: the listener's certificate and key; with ``verify_client``
    a client certificate signed by ``ca_file`` is required. ConfigError if a file cannot be read."""
    assert tls.cert_file is not None
    try:
        cert = Path(tls.cert_file).read_bytes()
        key = Path(tls.key_file or tls.cert_file).read_bytes()
        ca = Path(tls.ca_file).read_bytes() if tls.verify_client and tls.ca_file is not None else None
    except OSError as exc:
        raise ConfigError(f"cannot read a TLS file of the gRPC port: {exc}") from exc
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=tls.verify_client)


class GrpcProxy:
    """Serves apache.rocketmq.v2.MessagingService on ``host:port`` (0: any free port) for ``namesrv``'s cluster."""

    def __init__(
        self,
        namesrv: str | list[str],
        *,
        host: str = "127.0.0.1",
        port: int = 8081,
        advertised_host: str | None = None,
        settings: ProxySettings | None = None,
        acl_file: str | Path | None = None,
        tls: TlsSettings | None = None,
        acl_date_window_seconds: float = DEFAULT_DATE_WINDOW_SECONDS,
        **client_options: Any,
    ) -> None:
        """``acl_file``: check 5.x clients' authorization headers against this ACL file's accounts
        (:mod:`pymq.grpc_proxy.auth`); ``client_options`` go to the front end's own pymq client (e.g.
        access_key/secret_key, its account on ACL brokers, which must allow what its clients do)."""
        self.namesrv = namesrv
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.settings = settings or ProxySettings()
        self._client_options = client_options
        try:
            self.acl = GrpcAcl(acl_file, date_window_seconds=acl_date_window_seconds) if acl_file is not None else None
        except AclFileError as exc:
            raise ConfigError(str(exc)) from exc
        #: TLS on the port (``tls.enable``): the same certificate files as the daemon's other listeners
        self.credentials = server_credentials(tls) if tls is not None and tls.enable else None
        self.producer: ProxyProducer | None = None
        self.server: grpc.aio.Server | None = None
        self.service: MessagingService | None = None

    async def start(self) -> GrpcProxy:
        """Listen (ConfigError in the daemons' wording if the port cannot be had), then serve."""
        options = [
            ("grpc.max_receive_message_length", self.settings.max_body_size * 2),
            # no SO_REUSEPORT: a second front end on a taken port must fail, not share it silently
            ("grpc.so_reuseport", 0),
        ]
        if self.port:  # probe first: grpc's own bind failure also prints a line of its C core on stderr
            self._check_port()
        server = grpc.aio.server(options=options)
        try:
            addr = f"{self.host}:{self.port}"
            if self.credentials is not None:
                bound = server.add_secure_port(addr, self.credentials)
            else:
                bound = server.add_insecure_port(addr)
        except RuntimeError:
            bound = 0
        if bound == 0:
            raise ConfigError(f"cannot listen on {self.host}:{self.port}: refused by grpc")
        self.port = bound
        self.producer = ProxyProducer(self.namesrv, "PYMQ_GRPC_PROXY", **self._client_options)
        await self.producer.start()
        service = MessagingService(self.producer, (self.advertised_host, bound), self.settings, self.acl)
        self.producer.on_check = service.on_transaction_check
        add_to_server(service, server)
        await server.start()
        service.clients.start()
        self.server, self.service = server, service
        log.info("grpc proxy listening on %s:%d", self.host, bound)
        return self

    def _check_port(self) -> None:
        """ConfigError in the daemons' one wording when the port cannot be had (in use, not permitted)."""
        try:
            bind_socket(self.host, self.port).close()
        except OSError as exc:
            raise ConfigError(cannot_listen(self.host, self.port, exc)) from None

    async def close(self, grace: float = 1.0) -> None:
        server, self.server = self.server, None
        if server is not None:
            await server.stop(grace)
        service, self.service = self.service, None
        if service is not None:
            await service.clients.close()
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.close()

    async def __aenter__(self) -> GrpcProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["GrpcProxy"]
