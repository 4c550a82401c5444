"""``pymq-admin``: operate a pymq cluster from the command line (like RocketMQ's mqadmin).

Errors are one line on stderr and a non-zero exit; ``--json`` on the group makes every
command print JSON. The group lives in :mod:`pymq.cli.admin_group`; this module holds the
cluster and topic commands and loads the other command modules onto the group.
"""

from __future__ import annotations

import click

from pymq.cli import admin_ops, admin_replication
from pymq.cli.admin_group import AdminContext, admin_command, main
from pymq.cli.output import emit, fmt_ms, table
from pymq.client.admin import AdminClient
from pymq.protocol.route import perm_to_string

__all__ = ["main"]
assert admin_ops  # registers the group, message and broker commands on ``main``
assert admin_replication  # registers broker-role

# transactional messages: tx-pending; connected clients: consumer-progress, consumer-connection,
# consumer-running-info, consume-message-directly, producer-connection; acl-accounts, acl-update, acl-delete
from pymq.cli import admin_acl, admin_clients, admin_tx  # noqa: E402

assert admin_tx
assert admin_acl
assert admin_clients


# --- cluster and topics ------------------------------------------------------------------------------


@main.command("cluster-list")
@admin_command
async def cluster_list(admin: AdminClient, ctx: AdminContext) -> None:
    """List clusters, broker groups and their addresses.

    \b
    Example:
      pymq-admin cluster-list
    """
    info = await admin.cluster_info()
    rows = []
    for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
        for name in names:
            addrs = info["brokerAddrTable"].get(name, {}).get("brokerAddrs", {})
            for bid, addr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                rows.append(
                    {
                        "cluster": cluster,
                        "brokerName": name,
                        "brokerId": int(bid),
                        "addr": addr,
                        "role": "master" if int(bid) == 0 else "slave",
                    }
                )
    await admin_replication.replication_columns(admin, rows)
    emit(
        info if ctx.as_json else rows,
        ctx.as_json,
        table(
            rows,
            [
                ("cluster", "CLUSTER"),
                ("brokerName", "BROKER"),
                ("brokerId", "ID"),
                ("role", "ROLE"),
                ("addr", "ADDRESS"),
                ("epoch", "EPOCH"),
                ("lagBytes", "LAG_BYTES"),
            ],
        ),
    )


@main.command("topic-create")
@click.option("--topic", required=True)
@click.option("--queues", default=8, show_default=True, help="Read and write queues per broker.")
@click.option("--cluster", default=None, help="Create on every master of this cluster (default: all clusters).")
@click.option("--broker", "broker_addr", default=None, help="Create on this broker address only.")
@click.option("--order", is_flag=True, help="Mark the topic as ordered.")
@click.option(
    "--attribute",
    "attributes",
    multiple=True,
    metavar="KEY=VALUE",
    help="A topic attribute, e.g. priority.levels=10 (a priority topic); repeatable.",
)
@admin_command
async def topic_create(
    admin: AdminClient,
    ctx: AdminContext,
    topic: str,
    queues: int,
    cluster: str | None,
    broker_addr: str | None,
    order: bool,
    attributes: tuple[str, ...],
) -> None:
    """Create or update a topic.

    \b
    Example:
      pymq-admin topic-create --topic orders --queues 8
      pymq-admin topic-create --topic orders --broker 10.0.0.5:10911
      pymq-admin topic-create --topic tasks --attribute priority.levels=10
    """
    attrs = {}
    for item in attributes:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.UsageError(f"--attribute takes KEY=VALUE, got {item!r}")
        attrs[key] = value
    addrs = await admin.create_topic(
        topic, queues, cluster=cluster, broker_addr=broker_addr, order=order, attributes=attrs or None
    )
    emit(
        {"topic": topic, "queues": queues, "brokers": addrs},
        ctx.as_json,
        f"topic {topic} created with {queues} queues on {', '.join(addrs)}",
    )


@main.command("topic-list")
@admin_command
async def topic_list(admin: AdminClient, ctx: AdminContext) -> None:
    """List every topic the nameserver routes.

    \b
    Example:
      pymq-admin topic-list
    """
    topics = await admin.topic_list()
    emit(topics, ctx.as_json, "\n".join(topics))


@main.command("topic-route")
@click.option("--topic", required=True)
@admin_command
async def topic_route(admin: AdminClient, ctx: AdminContext, topic: str) -> None:
    """Show a topic's queues per broker and the brokers' addresses.

    \b
    Example:
      pymq-admin topic-route --topic orders
    """
    route = await admin.topic_route(topic)
    rows = []
    for qd in route.queueDatas:
        bd = route.broker(qd.brokerName)
        rows.append(
            {
                "brokerName": qd.brokerName,
                "read": qd.readQueueNums,
                "write": qd.writeQueueNums,
                "perm": perm_to_string(qd.perm),
                "addrs": [f"{bid}={a}" for bid, a in sorted((bd.brokerAddrs if bd else {}).items())],
            }
        )
    emit(
        route.to_dict(),
        ctx.as_json,
        table(
            rows,
            [
                ("brokerName", "BROKER"),
                ("read", "READ"),
                ("write", "WRITE"),
                ("perm", "PERM"),
                ("addrs", "ADDRESSES (id=addr)"),
            ],
        ),
    )


@main.command("topic-delete")
@click.option("--topic", required=True)
@click.option("--cluster", default=None, help="Only from this cluster's brokers.")
@admin_command
async def topic_delete(admin: AdminClient, ctx: AdminContext, topic: str, cluster: str | None) -> None:
    """Delete a topic from its brokers and from every nameserver.

    \b
    Example:
      pymq-admin topic-delete --topic orders
    """
    addrs = await admin.delete_topic(topic, cluster=cluster)
    emit(
        {"topic": topic, "brokers": addrs},
        ctx.as_json,
        f"topic {topic} deleted from {', '.join(addrs) or 'routes'}",
    )


@main.command("topic-status")
@click.option("--topic", required=True)
@admin_command
async def topic_status(admin: AdminClient, ctx: AdminContext, topic: str) -> None:
    """Per queue: broker, min/max offset and last store time.

    \b
    Example:
      pymq-admin topic-status --topic orders
    """
    rows = await admin.topic_status(topic)
    view = [{**r, "last": fmt_ms(r.get("lastUpdateTimestamp"))} for r in rows]
    emit(
        rows,
        ctx.as_json,
        table(
            view,
            [
                ("brokerName", "BROKER"),
                ("queueId", "QUEUE"),
                ("minOffset", "MIN"),
                ("maxOffset", "MAX"),
                ("last", "LAST STORED"),
            ],
        ),
    )


if __name__ == "__main__":
    main()
