"""``pymq-admin broker-role``, and the replication columns of ``cluster-list``."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from pymq.cli.admin_group import AdminContext, admin_command, main
from pymq.cli.output import emit, key_values
from pymq.client.admin import AdminClient
from pymq.client.admin_replication import promote_slave
from pymq.errors import PymqError


@main.command("broker-role")
@click.option("--broker-name", required=True, help="The broker group (brokerName).")
@click.option("--promote", "slave_addr", required=True, help="Address of the slave to make master.")
@click.option("--force", is_flag=True, help="Promote even if the slave may not hold all of the master's data.")
@click.option(
    "--role",
    type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER"]),
    default=None,
    help="Role of the new master (default: the old master's, else ASYNC_MASTER).",
)
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait for the slave to catch up.")
@admin_command
async def broker_role(
    admin: AdminClient,
    ctx: AdminContext,
    broker_name: str,
    slave_addr: str,
    force: bool,
    role: str | None,
    timeout: float,
) -> None:
    """Make a slave its group's master (brokerId 0, a new epoch); the old master, if alive, follows it.

    The old master is fenced first (no writes), the slave must then hold its whole commitlog
    (else nothing changes, unless --force), and the old master becomes a slave under the
    promoted slave's old id.

    \b
    Example:
      pymq-admin broker-role --broker-name broker-a --promote 10.0.0.2:10911
    """
    result = await promote_slave(admin, broker_name, slave_addr, force=force, role=role, catch_up_timeout=timeout)
    emit(result, ctx.as_json, key_values(result))


async def replication_columns(admin: AdminClient, rows: list[dict[str, Any]]) -> None:
    """Add each broker's role, epoch and replication lag (from its runtime info) to cluster-list rows."""

    async def one(row: dict[str, Any]) -> None:
        try:
            info = await admin.broker_status(row["addr"])
        except PymqError:
            row.update(role="unreachable", epoch="", lagBytes="")
            return
        row.update(
            role=info.get("role", row["role"]),
            epoch=info.get("epoch", ""),
            lagBytes=info.get("replicationLagBytes", ""),
        )

    await asyncio.gather(*(one(r) for r in rows))
