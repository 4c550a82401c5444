"""``pymq-dashboard``: the operators' web dashboard as its own daemon (issue 33)."""

from __future__ import annotations

import click

from pymq.cli.common import log_options, serve, version_option
from pymq.config import DashboardConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
@click.option("--namesrv", default=None, help="Nameserver addresses, ';'-separated (default 127.0.0.1:9876).")
@click.option("--host", default=None, help="HTTP listen address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="HTTP port (default 8080; 0 picks a free one).")
@click.option("--read-only", is_flag=True, default=None, help="Refuse every mutation.")
@click.option("--login", is_flag=True, default=None, help="Ask for an ACL account's keys (clusters with ACL on).")
@click.option("--session-secret", default=None, help="Key that signs session cookies (default: random per start).")
@click.option("--poll-interval", "poll_interval_seconds", type=float, default=None, help="Seconds between chart polls.")
@click.option("--access-key", default=None, help="ACL account for the chart polls (and the pages without --login).")
@click.option("--secret-key", default=None, help="That account's secret key (or PYMQ_SECRET_KEY).")
@click.option("--grafana-url", default=None, help="Link the Charts page to this Grafana dashboard.")
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
    """Serve the pymq web dashboard for one cluster.

    \b
    Example:
      pymq-dashboard --namesrv 127.0.0.1:9876 --port 8080
      pymq-dashboard --namesrv 'ns1:9876;ns2:9876' --read-only
    """
    from pymq.dashboard.server import DashboardServer

    overrides = {**flags, "log_level": log_level}
    if namesrv:
        overrides["namesrv_addrs"] = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
    serve(DashboardConfig, config_path, overrides, log_format, port_file, DashboardServer)


if __name__ == "__main__":
    main()
