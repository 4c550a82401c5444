"""The gRPC front end's lifecycle: a pymq producer (its client instance finds the brokers) and a grpc.aio server."""

from __future__ import annotations

import logging
from typing import Any

import grpc

from pymq.client.producer import Producer
from pymq.grpc_proxy.service import MessagingService, ProxySettings, add_to_server

log = logging.getLogger("pymq.grpc_proxy")


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
        **client_options: Any,
    ) -> None:
        self.namesrv = namesrv
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.settings = settings or ProxySettings()
        self._client_options = client_options
        self.producer: Producer | None = None
        self.server: grpc.aio.Server | None = None

    async def start(self) -> GrpcProxy:
        self.producer = Producer(self.namesrv, "PYMQ_GRPC_PROXY", **self._client_options)
        await self.producer.start()
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", self.settings.max_body_size * 2)])
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            await self.producer.close()
            raise OSError(f"cannot listen on {self.host}:{self.port}")
        self.port = bound
        add_to_server(MessagingService(self.producer, (self.advertised_host, bound), self.settings), server)
        await server.start()
        self.server = server
        log.info("grpc proxy listening on %s:%d", self.host, bound)
        return self

    async def close(self, grace: float = 1.0) -> None:
        server, self.server = self.server, None
        if server is not None:
            await server.stop(grace)
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.close()

    async def __aenter__(self) -> GrpcProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["GrpcProxy"]
