"""``pymq-broker``: the broker daemon."""

from __future__ import annotations

from typing import Any

import click

from pymq.cli.common import daemon_options, serve, version_option
from pymq.cli.security_options import daemon_security_overrides
from pymq.config import SMALL_STORE_SIZES, BrokerConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
@click.option("--cluster", "cluster_name", default=None, help="Cluster name (default DefaultCluster).")
@click.option("--broker-name", default=None, help="Broker group name (default broker-a).")
@click.option("--broker-id", type=int, default=None, help="0 for the master, >0 for a slave.")
@click.option("--role", type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]), default=None)
@click.option("--host", default=None, help="Listen address (default 0.0.0.0).")
@click.option("--port", type=int, default=None, help="Listen port (default 10911; 0 picks a free one).")
@click.option("--advertised-host", default=None, help="Address clients should use (default: this host's IP).")
@click.option(
    "--namesrv", "namesrv", default=None, help="Nameserver addresses, ';'-separated (default 127.0.0.1:9876)."
)
@click.option(
    "--grpc-port",
    type=int,
    default=None,
    help="Also serve RocketMQ 5.x clients (gRPC front end in this process) on this port (default: not).",
)
@click.option("--store-dir", default=None, type=click.Path(file_okay=False), help="Store directory (default ./store).")
@click.option("--flush", "flush_disk_type", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]), default=None)
@click.option(
    "--auto-create-topic/--no-auto-create-topic",
    default=None,
    help="Create unknown topics on first send (default off).",
)
@click.option(
    "--register-interval",
    "register_interval_seconds",
    type=float,
    default=None,
    help="Seconds between registrations with the nameservers (default 30).",
)
@click.option(
    "--controller-mode/--no-controller-mode",
    default=None,
    help="Heartbeat to the failover controller and take the role it assigns (default off).",
)
@click.option("--small-files", is_flag=True, help="Small store files (32 MiB commitlog) for development and tests.")
@daemon_options
def main(
    config_path: str | None,
    namesrv: str | None,
    store_dir: str | None,
    flush_disk_type: str | None,
    small_files: bool,
    port_file: str | None,
    log_level: str | None,
    log_format: str,
    **flags: Any,
) -> None:
    """Run a pymq broker.

    \b
    Example:
      pymq-broker --namesrv 127.0.0.1:9876 --store-dir ./store
      pymq-broker --config deploy/config/broker-a.toml --store-dir ./store-a --flush SYNC_FLUSH
    """
    security = daemon_security_overrides(flags)
    overrides: dict[str, Any] = {**flags, **security, "log_level": log_level}
    if namesrv:
        overrides["namesrv_addrs"] = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
    store: dict[str, Any] = {}
    if small_files:
        store.update(SMALL_STORE_SIZES)
    if store_dir:
        store["store_dir"] = store_dir
    if flush_disk_type:
        store["flush_disk_type"] = flush_disk_type
    if store:
        overrides["store"] = store
    serve(BrokerConfig, config_path, overrides, log_format, port_file, make_broker)


def make_broker(config: BrokerConfig) -> Any:
    """The broker, with the gRPC front end beside it when ``grpc_port`` is set."""
    from pymq.broker.app import BrokerApp

    if config.grpc_port is None:
        return BrokerApp(config)
    return BrokerWithGrpc(config, BrokerApp(config))


class BrokerWithGrpc:
    """A broker and a gRPC front end for its cluster in one process (RocketMQ's proxy "local mode")."""

    def __init__(self, config: BrokerConfig, broker: Any) -> None:
        from pymq.grpc_proxy import GrpcProxy

        self.broker = broker
        assert config.grpc_port is not None
        acl = config.acl  # the broker's ACL file also guards its front end; its account signs the front end's calls
        credentials: dict[str, Any] = {}
        if acl.access_key is not None:
            credentials = {"access_key": acl.access_key, "secret_key": acl.secret_key}
        self.proxy = GrpcProxy(
            config.namesrv_addrs,
            host=config.host,
            port=config.grpc_port,
            advertised_host=config.advertised_host,
            acl_file=acl.file if acl.enable else None,
            tls=config.tls,  # the broker's listener certificates serve its gRPC port too
            **credentials,
        )

    @property
    def address(self) -> str:
        return str(self.broker.address)

    async def start(self) -> None:
        await self.broker.start()
        try:
            await self.proxy.start()
        except BaseException:
            await self.broker.close()
            raise

    async def close(self) -> None:
        await self.proxy.close()
        await self.broker.close()


if __name__ == "__main__":
    main()
