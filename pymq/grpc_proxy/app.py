"""``pymq-proxy``'s daemon object: a :class:`GrpcProxy` built from :class:`~pymq.config.ProxyConfig`."""

from __future__ import annotations

from pymq.config import ProxyConfig
from pymq.grpc_proxy.server import GrpcProxy
from pymq.grpc_proxy.settings import ProxySettings


class ProxyApp:
    """start/close/address, as the CLI's daemon runner expects."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        settings = ProxySettings(
            max_body_size=config.max_body_size,
            receive_batch_size=config.receive_batch_size,
            long_polling_ms=config.long_polling_ms,
            default_invisible_ms=config.default_invisible_ms,
            unset_message_type_is_normal=config.unset_message_type_is_normal,
        )
        acl = config.acl
        credentials = {"access_key": acl.access_key, "secret_key": acl.secret_key} if acl.access_key else {}
        self.proxy = GrpcProxy(
            config.namesrv_addrs,
            host=config.host,
            port=config.port,
            advertised_host=config.advertised_host,
            settings=settings,
            acl_file=acl.file if acl.enable else None,
            tls=config.tls,
            acl_date_window_seconds=config.acl_date_window_seconds,
            **credentials,
        )

    @property
    def address(self) -> str:
        return f"{self.proxy.advertised_host}:{self.proxy.port}"

    async def start(self) -> None:
        await self.proxy.start()

    async def close(self) -> None:
        await self.proxy.close()


__all__ = ["ProxyApp"]
