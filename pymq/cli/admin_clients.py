"""``pymq-admin`` commands about connected clients: consumer progress and connections, a consumer's
running info, producer connections (loaded onto the group by :mod:`pymq.cli.admin`)."""

from __future__ import annotations

import json
from typing import Any

import click

from pymq.cli.admin_group import AdminContext, admin_command, main
from pymq.cli.output import emit, fmt_ms, key_values, table
from pymq.client.admin import AdminClient
from pymq.errors import ClientError


@main.command("consumer-progress")
@click.option("--group", required=True)
@click.option("--topic", default=None, help="Only this topic.")
@admin_command
async def consumer_progress(admin: AdminClient, ctx: AdminContext, group: str, topic: str | None) -> None:
    """Per queue: broker offset, consumer offset, lag, in flight (popped, not acked), owning client; totals.

    \b
    Example:
      pymq-admin consumer-progress --group order-service
    """
    data = await admin.consumer_progress(group, topic)
    human = table(
        data["queues"],
        [
            ("topic", "TOPIC"),
            ("brokerName", "BROKER"),
            ("queueId", "Q"),
            ("brokerOffset", "BROKER OFFSET"),
            ("consumerOffset", "CONSUMER OFFSET"),
            ("lag", "LAG"),
            ("inFlight", "IN FLIGHT"),
            ("clientId", "CLIENT"),
        ],
    )
    emit(data, ctx.as_json, f"{human}\n\ntotal lag: {data['totalLag']}  in flight: {data['totalInFlight']}")


@main.command("consumer-connection")
@click.option("--group", required=True)
@admin_command
async def consumer_connection(admin: AdminClient, ctx: AdminContext, group: str) -> None:
    """Clients, subscriptions and message model of a consumer group.

    \b
    Example:
      pymq-admin consumer-connection --group order-service
    """
    info = await admin.consumer_connection(group)
    subs = [{"topic": s["topic"], "expression": s["subString"]} for s in info["subscriptions"]]
    human = "\n\n".join([
        key_values({k: info[k] for k in ("group", "messageModel", "consumeType", "consumeFromWhere")}),
        table(info["connections"], _CONNECTION_COLUMNS),
        table(subs, [("topic", "TOPIC"), ("expression", "EXPRESSION")]),
    ])  # fmt: skip
    emit(info, ctx.as_json, human)


@main.command("consumer-running-info")
@click.option("--group", required=True)
@click.option("--client-id", required=True, help="As consumer-connection lists it (ip@instance).")
@click.option("--jstack", is_flag=True, help="Add the client's thread and asyncio task stacks.")
@admin_command
async def consumer_running_info(
    admin: AdminClient, ctx: AdminContext, group: str, client_id: str, jstack: bool
) -> None:
    """One consumer client's running info: subscriptions, per owned queue its cached messages, last pull
    and consume times and lock, and with --jstack its stacks (asked through a broker it is connected to).

    \b
    Example:
      pymq-admin consumer-running-info --group order-service --client-id 10.0.0.5@4242 --jstack
    """
    info = await admin.consumer_running_info(group, client_id, jstack)
    emit(info, ctx.as_json, running_info_text(info))


def running_info_text(info: dict[str, Any]) -> str:
    """The human form of a consumer's running info (pymq's body; a 4.x client's JSON as it came)."""
    if "raw" in info or "mqTable" not in info or not isinstance(info["mqTable"], list):
        return json.dumps({k: v for k, v in info.items() if k != "raw"}, indent=2, default=str) + (
            "\n" + str(info["raw"]) if "raw" in info else ""
        )
    head = {"clientId": info.get("clientId"), "group": info.get("group"), "broker": info.get("brokerName")}
    subs = [{"topic": s.get("topic"), "expression": s.get("subString")} for s in info.get("subscriptionSet") or []]
    rows = [
        {
            "queue": f"{r['mq'].get('topic')}@{r['mq'].get('brokerName')}:{r['mq'].get('queueId')}",
            **r["pq"],
            "lastPull": fmt_ms(r["pq"].get("lastPullTimestamp")),
            "lastConsume": fmt_ms(r["pq"].get("lastConsumeTimestamp")),
        }
        for r in info["mqTable"]
    ]
    parts = [
        key_values(
            {
                **head,
                **{k: fmt_ms(v) if k.endswith("Timestamp") else v for k, v in (info.get("properties") or {}).items()},
            }
        ),
        table(subs, [("topic", "TOPIC"), ("expression", "EXPRESSION")]),
        table(rows, _PROCESS_QUEUE_COLUMNS),
    ]
    if info.get("jstack"):
        parts.append(str(info["jstack"]))
    return "\n\n".join(parts)


_PROCESS_QUEUE_COLUMNS = [
    ("queue", "QUEUE"),
    ("cachedMsgCount", "CACHED"),
    ("cachedMsgSizeInBytes", "BYTES"),
    ("commitOffset", "COMMIT OFFSET"),
    ("locked", "LOCKED"),
    ("lastPull", "LAST PULL"),
    ("lastConsume", "LAST CONSUME"),
]


_CONNECTION_COLUMNS = [
    ("clientId", "CLIENT ID"),
    ("clientAddr", "ADDRESS"),
    ("language", "LANGUAGE"),
    ("version", "VERSION"),
    ("protocol", "PROTOCOL"),
]


@main.command("producer-connection")
@click.option("--group", default=None, help="Only this producer group (a 5.x producer's group is its topic).")
@admin_command
async def producer_connection(admin: AdminClient, ctx: AdminContext, group: str | None) -> None:
    """Connected producers by group, as every master sees them (pymq, RocketMQ 4.x and, via the gRPC
    front end, 5.x clients: the PROTOCOL column says which).

    \b
    Example:
      pymq-admin producer-connection --group order-producers
    """
    conns = await admin.producer_connections()
    if group is not None:
        if group not in conns:
            raise ClientError(f"no producer of group {group} is connected")
        conns = {group: conns[group]}
    rows = [{**c, "group": g, "protocol": c.get("protocol", "pymq")} for g, cs in sorted(conns.items()) for c in cs]
    columns = [("group", "GROUP"), *_CONNECTION_COLUMNS, ("brokerName", "BROKER")]
    emit(conns, ctx.as_json, table(rows, columns))


@main.command("consume-message-directly")
@click.option("--group", required=True)
@click.option("--msg-id", required=True, help="The offset message id (or the unique id, with --topic).")
@click.option("--client-id", default=None, help="As consumer-connection lists it; default: any client of the group.")
@click.option("--topic", default=None, help="The message's topic (needed for a unique id).")
@admin_command
async def consume_message_directly(
    admin: AdminClient, ctx: AdminContext, group: str, msg_id: str, client_id: str | None, topic: str | None
) -> None:
    """Have a consumer client of the group consume one stored message with its listener now (RocketMQ's
    consumeMessageDirectly, the dashboard's "resend to a group"): the client's answer is printed, no
    offset moves. The client must be connected to the broker that stores the message.

    \b
    Example:
      pymq-admin consume-message-directly --group order-service --msg-id 7F00000100002A9F0000000000000000
    """
    result = await admin.consume_message_directly(group, msg_id, client_id, topic)
    keys = ("consumeResult", "remark", "spentTimeMills", "clientId", "brokerName", "topic", "msgId", "offsetMsgId")
    emit(result, ctx.as_json, key_values({k: result.get(k) for k in keys}))
