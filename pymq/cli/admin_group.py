"""The ``pymq-admin`` command group: options shared by every command and the runner they use.

Errors are one line on stderr and a non-zero exit; ``--json`` on the group makes every
command print JSON.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import click

from pymq.cli.common import version_option
from pymq.cli.security_options import security_kwargs, security_options
from pymq.client.admin import AdminClient
from pymq.errors import PymqError, RequestCodeNotSupportedError
from pymq.logs import configure_logging
from pymq.transport.loop import run


@dataclass
class AdminContext:
    namesrv: str
    as_json: bool
    timeout: float
    #: access_key, secret_key, tls ... for AdminClient (see cli.security_options)
    security: dict[str, Any] = field(default_factory=dict)


def admin_command(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run ``fn(admin, ctx, **options)`` on the event loop; pymq errors become one line and exit 1."""

    def wrapper(ctx: AdminContext, /, **kwargs: Any) -> None:
        async def go() -> None:
            async with AdminClient(ctx.namesrv, timeout=ctx.timeout, **ctx.security) as admin:
                await fn(admin, ctx, **kwargs)

        try:
            run(go())
        except RequestCodeNotSupportedError as exc:
            # e.g. --namesrv given a broker's port: the broker's remark says so and names a nameserver
            click.echo(f"error: {exc.addr}: {exc.remark}" if exc.addr else f"error: {exc}", err=True)
            sys.exit(1)
        except (PymqError, ValueError, OSError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)

    functools.update_wrapper(wrapper, fn)  # click reads the name, docstring and options from fn
    return click.pass_obj(wrapper)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
@click.option(
    "--namesrv",
    envvar="PYMQ_NAMESRV",
    default="127.0.0.1:9876",
    show_default=True,
    help="Nameserver address(es), ';'-separated (env PYMQ_NAMESRV).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--timeout", default=5.0, show_default=True, help="Seconds per request.")
@security_options()
@click.pass_context
def main(ctx: click.Context, /, namesrv: str, as_json: bool, timeout: float, **security: Any) -> None:
    """Administer a pymq cluster.

    \b
    Example:
      pymq-admin --namesrv 127.0.0.1:9876 cluster-list
      pymq-admin --json topic-route --topic orders
    """
    configure_logging("error")
    ctx.obj = AdminContext(namesrv, as_json, timeout, security_kwargs(security))
