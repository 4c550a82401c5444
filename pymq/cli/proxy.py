"""``pymq-proxy``: the stateless RocketMQ 5.x gRPC front end (apache.rocketmq.v2.MessagingService).

Any number of them may run behind a load balancer: each finds the brokers through the
nameservers and keeps no state of its own (receipt handles name their broker).
"""

from __future__ import annotations

import sys

import click

from pymq.cli.common import EXIT_CONFIG, fail, log_options, run_daemon, setup_logging, version_option
from pymq.config import ProxyConfig
from pymq.errors import ConfigError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
@click.option("--host", default=None, help="Listen address (default 0.0.0.0).")
@click.option("--port", type=int, default=None, help="gRPC listen port (default 8081; 0 picks a free one).")
@click.option("--advertised-host", default=None, help="Host put in route answers (default: --host, or 127.0.0.1).")
@click.option(
    "--namesrv", "namesrv", default=None, help="Nameserver addresses, ';'-separated (default 127.0.0.1:9876)."
)
@click.option("--port-file", type=click.Path(dir_okay=False), help="Write host:port here once serving.")
@log_options
def main(
    config_path: str | None,
    namesrv: str | None,
    port_file: str | None,
    log_level: str | None,
    log_format: str,
    **flags: object,
) -> None:
    """Run a RocketMQ 5.x gRPC front end for a pymq cluster.

    \b
    Example:
      pymq-proxy --namesrv 127.0.0.1:9876 --port 8081
      PYMQ_PORT=8082 pymq-proxy --config deploy/config/proxy-1.toml
    """
    from pymq.config import load_config
    from pymq.grpc_proxy.app import ProxyApp

    overrides: dict[str, object] = {**flags, "log_level": log_level}
    if namesrv:
        overrides["namesrv_addrs"] = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
    try:
        config = load_config(ProxyConfig, config_path, overrides=overrides)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
        return
    setup_logging(config.log_level, log_format)
    sys.exit(run_daemon(lambda: ProxyApp(config), port_file))


if __name__ == "__main__":
    main()
