"""``pymq-namesrv``: the nameserver daemon."""

from __future__ import annotations

import click

from pymq.cli.common import daemon_options, serve, version_option
from pymq.cli.security_options import daemon_security_overrides
from pymq.config import NamesrvConfig
from pymq.nameserver.app import NamesrvApp


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
@click.option("--host", default=None, help="Listen address (default 0.0.0.0).")
@click.option("--port", type=int, default=None, help="Listen port (default 9876; 0 picks a free one).")
@click.option(
    "--broker-expiry",
    "broker_expiry_seconds",
    type=float,
    default=None,
    help="Seconds before a silent broker is dropped (default 120).",
)
@click.option(
    "--scan-interval",
    "scan_interval_seconds",
    type=float,
    default=None,
    help="Seconds between expiry scans (default 10).",
)
@click.option(
    "--controller",
    type=click.Choice(["off", "embedded", "etcd"]),
    default=None,
    help="Run the failover controller here, its state in --controller-dir or etcd (default off).",
)
@click.option(
    "--controller-etcd",
    "controller_etcd_endpoints",
    default=None,
    help="etcd endpoints for --controller etcd, ';'-separated (default http://127.0.0.1:2379).",
)
@click.option("--controller-dir", type=click.Path(file_okay=False), default=None, help="Controller state directory.")
@click.option(
    "--controller-master-timeout",
    "controller_master_timeout_seconds",
    type=float,
    default=None,
    help="Seconds of master silence before an election (default 3).",
)
@click.option(
    "--controller-lease",
    "controller_lease_seconds",
    type=float,
    default=None,
    help="Seconds a master holds its mastership after a heartbeat (default 2; < the timeout).",
)
@click.option(
    "--controller-etcd-lease",
    "controller_etcd_lease_seconds",
    type=int,
    default=None,
    help="TTL in seconds of the etcd lease the active controller holds (default 5; etcd raises it to its minimum).",
)
@daemon_options
def main(
    config_path: str | None, port_file: str | None, log_level: str | None, log_format: str, **flags: object
) -> None:
    """Run a pymq nameserver.

    \b
    Example:
      pymq-namesrv --port 9876
      PYMQ_PORT=9878 pymq-namesrv --config deploy/config/namesrv-1.toml --metrics-port 0
    """
    security = daemon_security_overrides(flags)  # popped from flags first
    if flags.get("controller_etcd_endpoints"):
        flags["controller_etcd_endpoints"] = [e for e in str(flags["controller_etcd_endpoints"]).split(";") if e]
    overrides = {**flags, **security, "log_level": log_level}
    serve(NamesrvConfig, config_path, overrides, log_format, port_file, NamesrvApp)


if __name__ == "__main__":
    main()
