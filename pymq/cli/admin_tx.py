"""``pymq-admin`` commands for transactional messages (loaded onto the group by :mod:`pymq.cli.admin`)."""

from __future__ import annotations

import click

from pymq.cli.admin_group import AdminContext, admin_command, main
from pymq.cli.output import emit, fmt_ms, table
from pymq.client.admin import AdminClient


@main.command("tx-pending")
@click.option("--group", default=None, help="Only this producer group (default: every group).")
@click.option("--cluster", default=None, help="Masters of this cluster only (default: all clusters).")
@click.option("--broker", "broker_addr", default=None, help="This broker address only.")
@click.option("--max", "max_num", default=1000, show_default=True, help="At most this many per broker.")
@admin_command
async def tx_pending(
    admin: AdminClient,
    ctx: AdminContext,
    group: str | None,
    cluster: str | None,
    broker_addr: str | None,
    max_num: int,
) -> None:
    """List half messages still waiting for a commit or rollback (oldest first).

    CHECKS counts the broker's check-backs so far; after transaction_check_max (15) the
    message goes to TRANS_CHECK_MAX_TIME_TOPIC.

    \b
    Example:
      pymq-admin tx-pending --group order-service
    """
    rows = await admin.pending_half_messages(group, broker_addr=broker_addr, cluster=cluster, max_num=max_num)
    human = [{**r, "stored": fmt_ms(r.get("storeTimestamp"))} for r in rows]
    emit(
        rows,
        ctx.as_json,
        table(
            human,
            [
                ("producerGroup", "GROUP"),
                ("topic", "TOPIC"),
                ("msgId", "MSG ID"),
                ("keys", "KEYS"),
                ("checkTimes", "CHECKS"),
                ("stored", "STORED"),
                ("brokerAddr", "BROKER"),
            ],
        ),
    )
