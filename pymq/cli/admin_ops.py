"""``pymq-admin`` commands for consumer groups, messages, dead letters and brokers."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import sys
from typing import Any

import click

from pymq.cli.admin_group import AdminContext, admin_command, main
from pymq.cli.output import emit, fmt_ms, key_values, table
from pymq.client.admin import AdminClient
from pymq.errors import ClientError, TopicNotExistError
from pymq.protocol.filter import parse_tags_strict
from pymq.protocol.message import MessageExt
from pymq.protocol.route import MessageQueue


def parse_time(value: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date/time (UTC unless it says otherwise)."""
    v = value.strip()
    if v.lstrip("-").isdigit():
        return int(v)
    try:
        when = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither milliseconds nor an ISO-8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def message_row(m: MessageExt) -> dict[str, Any]:
    return {
        "msgId": m.msg_id,
        "offsetMsgId": m.offset_msg_id,
        "topic": m.topic,
        "broker": m.broker_name,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "tags": m.tags,
        "keys": m.keys,
        "stored": fmt_ms(m.store_timestamp),
        "reconsumeTimes": m.reconsume_times,
        "size": len(m.body),
    }


MESSAGE_COLUMNS = [
    ("msgId", "MSG ID"),
    ("broker", "BROKER"),
    ("queueId", "Q"),
    ("queueOffset", "OFFSET"),
    ("tags", "TAGS"),
    ("keys", "KEYS"),
    ("stored", "STORED"),
    ("size", "BYTES"),
]


def preview(body: bytes, limit: int = 200) -> str:
    text = body[:limit].decode("utf-8", errors="replace")
    return text + ("…" if len(body) > limit else "")


# --- consumer groups --------------------------------------------------------------------------------


@main.command("reset-offset")
@click.option("--group", required=True)
@click.option("--topic", required=True)
@click.option(
    "--timestamp",
    required=True,
    help="ms since the epoch or ISO-8601 (2026-11-22T10:00:00Z); -1 latest, -2 earliest.",
)
@admin_command
async def reset_offset(admin: AdminClient, ctx: AdminContext, group: str, topic: str, timestamp: str) -> None:
    """Move a group's offsets on a topic to a point in time; running consumers follow at once.

    \b
    Example:
      pymq-admin reset-offset --group order-service --topic orders --timestamp 2026-11-22T08:00:00Z
    """
    result = await admin.reset_offset(group, topic, parse_time(timestamp))
    rows = [
        {"broker": b, "queueId": int(q), "offset": o} for b, t in sorted(result.items()) for q, o in sorted(t.items())
    ]
    emit(result, ctx.as_json, table(rows, [("broker", "BROKER"), ("queueId", "Q"), ("offset", "NEW OFFSET")]))


@main.command("update-subscription-group")
@click.option("--group", required=True)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="e.g. retryMaxTimes=5, consumeEnable=false, retryQueueNums=1 (repeatable).",
)
@click.option("--cluster", default=None)
@click.option("--broker", "broker_addr", default=None)
@admin_command
async def update_subscription_group(
    admin: AdminClient,
    ctx: AdminContext,
    group: str,
    settings: tuple[str, ...],
    cluster: str | None,
    broker_addr: str | None,
) -> None:
    """Create or change a consumer group's settings on the brokers.

    \b
    Example:
      pymq-admin update-subscription-group --group order-service --set retryMaxTimes=5
    """
    config: dict[str, Any] = {"groupName": group, **_key_values(settings)}
    out = await admin.update_subscription_group(config, broker_addr=broker_addr, cluster=cluster)
    emit(out, ctx.as_json, "\n".join(f"{addr}: {json.dumps(cfg, sort_keys=True)}" for addr, cfg in out.items()))


def _pairs(items: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        out.append((key, value))
    return out


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _key_values(items: tuple[str, ...]) -> dict[str, Any]:
    return {key: _json_or_text(value) for key, value in _pairs(items)}


def _broker_settings(items: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs parsed by the type of the broker setting they name: ``store.delete_when=10``
    stays the text "10", ``store.disk_full_ratio=0.95`` is a number; a key the broker does not
    have is sent as given (its answer lists the settings it takes)."""
    from pydantic import TypeAdapter, ValidationError

    from pymq.config import BrokerConfig, setting_field

    out: dict[str, Any] = {}
    for key, raw in _pairs(items):
        field = setting_field(BrokerConfig, key)
        if field is None or field.annotation is None:
            out[key] = _json_or_text(raw)
            continue
        adapter: TypeAdapter[Any] = TypeAdapter(field.annotation)
        try:
            value = adapter.validate_strings(raw)
        except ValidationError as exc:
            raise click.BadParameter(f"{key}={raw}: {exc.errors()[0]['msg']}", param_hint="--set") from None
        out[key] = adapter.dump_python(value, mode="json")
    return out


# --- brokers ----------------------------------------------------------------------------------------------


@main.command("broker-status")
@click.option("--broker", "broker_addr", required=True, help="Broker address host:port.")
@admin_command
async def broker_status(admin: AdminClient, ctx: AdminContext, broker_addr: str) -> None:
    """Store size, put/get TPS, disk use, commitlog min/max, uptime.

    \b
    Example:
      pymq-admin broker-status --broker 127.0.0.1:10911
    """
    info = await admin.broker_status(broker_addr)
    emit(info, ctx.as_json, key_values(info))


@main.command("timer-list")
@click.option("--topic", default=None, help="Only this topic.")
@click.option("--cluster", default=None, help="Masters of this cluster (default: all).")
@click.option("--broker", "broker_addr", default=None, help="Only this broker address.")
@admin_command
async def timer_list(
    admin: AdminClient, ctx: AdminContext, topic: str | None, cluster: str | None, broker_addr: str | None
) -> None:
    """Pending timer messages (not yet delivered) per topic and broker.

    \b
    Example:
      pymq-admin timer-list
      pymq-admin timer-list --topic orders
    """
    rows = await admin.pending_timers(broker_addr=broker_addr, cluster=cluster)
    rows = [r for r in rows if topic is None or r["topic"] == topic]
    text = "\n".join(f"{r['topic']}  {r['brokerAddr']}  {r['pending']}" for r in rows) or "no pending timers"
    emit(rows, ctx.as_json, text)


@main.command("update-broker-config")
@click.option(
    "--set",
    "settings",
    multiple=True,
    required=True,
    metavar="KEY=VALUE",
    help="e.g. auto_create_topic=true or store.disk_full_ratio=0.95 (repeatable).",
)
@click.option("--cluster", default=None)
@click.option("--broker", "broker_addr", default=None)
@admin_command
async def update_broker_config(
    admin: AdminClient,
    ctx: AdminContext,
    settings: tuple[str, ...],
    cluster: str | None,
    broker_addr: str | None,
) -> None:
    """Change broker settings that may change at runtime.

    \b
    Example:
      pymq-admin update-broker-config --broker 127.0.0.1:10911 --set auto_create_topic=true
    """
    out = await admin.update_broker_config(_broker_settings(settings), broker_addr=broker_addr, cluster=cluster)
    emit(out, ctx.as_json, "\n".join(f"{addr}: {json.dumps(v, sort_keys=True)}" for addr, v in out.items()))


# --- messages ----------------------------------------------------------------------------------------------


@main.command("query-key")
@click.option("--topic", required=True)
@click.option("--key", required=True)
@click.option("--begin", default=None, help="Stored at or after (ms or ISO-8601).")
@click.option("--end", default=None, help="Stored at or before (ms or ISO-8601).")
@click.option("--max", "max_num", default=32, show_default=True)
@admin_command
async def query_key(
    admin: AdminClient,
    ctx: AdminContext,
    topic: str,
    key: str,
    begin: str | None,
    end: str | None,
    max_num: int,
) -> None:
    """Find messages by business key (or unique message id).

    \b
    Example:
      pymq-admin query-key --topic orders --key order-1
    """
    msgs = await admin.query_key(
        topic,
        key,
        begin=parse_time(begin) if begin else 0,
        end=parse_time(end) if end else None,
        max_num=max_num,
    )
    rows = [message_row(m) for m in msgs]
    emit(rows, ctx.as_json, table(rows, MESSAGE_COLUMNS) if rows else "no message found")


@main.command("query-id")
@click.option("--id", "msg_id", required=True, help="Offset message id, or unique id (then give --topic).")
@click.option("--topic", default=None)
@admin_command
async def query_id(admin: AdminClient, ctx: AdminContext, msg_id: str, topic: str | None) -> None:
    """Show one message by id.

    \b
    Example:
      pymq-admin query-id --id 7F00000100002A9F0000000000001F40
      pymq-admin query-id --topic orders --id C0A8010100002A9F3B6E7110A3F20000
    """
    m = await admin.query_id(msg_id, topic)
    _show(ctx, m, raw=False)


@main.command("print-message")
@click.option("--topic", required=True)
@click.option("--queue", "queue_id", type=int, required=True)
@click.option("--offset", type=int, required=True)
@click.option("--broker", default=None, help="Broker name (default: the first that has the offset).")
@click.option("--raw", is_flag=True, help="Write the body bytes to stdout, nothing else.")
@admin_command
async def print_message(
    admin: AdminClient,
    ctx: AdminContext,
    topic: str,
    queue_id: int,
    offset: int,
    broker: str | None,
    raw: bool,
) -> None:
    """Headers and a body preview of the message at a queue offset.

    \b
    Example:
      pymq-admin print-message --topic orders --queue 0 --offset 42
      pymq-admin print-message --topic orders --queue 0 --offset 42 --raw > body.bin
    """
    _show(ctx, await admin.print_message(topic, queue_id, offset, broker), raw=raw)


def _show(ctx: AdminContext, m: MessageExt, raw: bool) -> None:
    if raw:
        sys.stdout.buffer.write(m.body)
        sys.stdout.buffer.flush()
        return
    data = m.to_dict()
    data["bodyPreview"] = preview(m.body)
    emit(data, ctx.as_json, key_values({**message_row(m), "properties": m.properties, "body": preview(m.body)}))


@main.command("send")
@click.option("--topic", required=True)
@click.option("--body", required=True, help="Message body (UTF-8 text).")
@click.option("--tags", default=None)
@click.option("--keys", default=None, help="Space-separated business keys.")
@click.option(
    "--delay-level",
    type=click.IntRange(0, 18),
    default=0,
    help="Deliver later: level 1-18 (1s 5s 10s 30s 1m ... 2h); 0 delivers at once.",
)
# --- timer and merged delay messages (issue 17) ---
@click.option("--delay-ms", type=click.IntRange(0), default=None, help="Timer message: deliver this many ms later.")
@click.option(
    "--deliver-at",
    type=click.IntRange(0),
    default=None,
    help="Timer message: deliver at this time (ms since the epoch).",
)
@click.option("--merge-key", default=None, help="Merged delay: messages of the topic with this key merge into one.")
@click.option(
    "--merge-window-ms",
    type=click.IntRange(0),
    default=None,
    help="Merged delay: deliver this long after the key's first message (needs --merge-key).",
)
@admin_command
async def send(
    admin: AdminClient,
    ctx: AdminContext,
    topic: str,
    body: str,
    tags: str | None,
    keys: str | None,
    delay_level: int,
    delay_ms: int | None,
    deliver_at: int | None,
    merge_key: str | None,
    merge_window_ms: int | None,
) -> None:
    """Send one message (at once, after a delay level, at a time, or merged with others of a key).

    \b
    Examples:
      pymq-admin send --topic orders --body 'hello' --tags created --keys order-1
      pymq-admin send --topic orders --body 'later' --delay-ms 90000
      pymq-admin send --topic orders --body 'cart changed' --merge-key cart-42 --merge-window-ms 5000
    """
    from pymq.client import Message, Producer

    if (merge_key is None) != (merge_window_ms is None):
        raise click.UsageError("--merge-key and --merge-window-ms go together")
    if sum(x is not None for x in (delay_ms, deliver_at, merge_key)) > 1:
        raise click.UsageError("use one of --delay-ms, --deliver-at and --merge-key")
    msg = Message(topic, body.encode(), tags=tags, keys=keys, delay_level=delay_level)
    if delay_ms is not None:
        msg.set_delay_ms(delay_ms)
    elif deliver_at is not None:
        msg.set_delivery_time(deliver_at)
    elif merge_key is not None and merge_window_ms is not None:
        msg.set_merge(merge_key, merge_window_ms)
    async with Producer(admin.ns.addrs, "PYMQ_ADMIN_PRODUCER", instance_name="pymq-admin", **ctx.security) as producer:
        r = await producer.send(msg)
    data = {
        "status": r.status.value,
        "msgId": r.msg_id,
        "offsetMsgId": r.offset_msg_id,
        "broker": r.message_queue.brokerName,
        "queueId": r.message_queue.queueId,
        "queueOffset": r.queue_offset,
    }
    emit(data, ctx.as_json, key_values(data))


@main.command("consume")
@click.option("--topic", required=True)
@click.option("--group", default="PYMQ_ADMIN_CONSUMER", show_default=True)
@click.option("--count", type=int, default=10, show_default=True, help="Stop after this many messages.")
@click.option(
    "--tags", default="*", show_default=True, callback=lambda _ctx, _param, v: _tag_expression(v),
    help="Tag expression, e.g. 'A || B'.",
)  # fmt: skip
@click.option("--wait", type=float, default=5.0, show_default=True, help="Give up after this many idle seconds.")
@click.option("--from-latest", is_flag=True, help="A new group starts at the end instead of the beginning.")
@admin_command
async def consume(
    admin: AdminClient,
    ctx: AdminContext,
    topic: str,
    group: str,
    count: int,
    tags: str,
    wait: float,
    from_latest: bool,
) -> None:
    """Read and print messages (the group's offsets are committed).

    With --json each message carries ``body`` (a text preview: the first 200 bytes as UTF-8, bad
    bytes replaced) and ``bodyBase64`` (the whole body, byte for byte).

    \b
    Example:
      pymq-admin consume --topic orders --count 1
    """
    from pymq.client import ConsumeFromWhere, PullConsumer

    try:
        await admin.topic_route(topic)
    except TopicNotExistError:
        raise ClientError(f"topic {topic} does not exist (create it with pymq-admin topic-create)") from None
    where = ConsumeFromWhere.LAST_OFFSET if from_latest else ConsumeFromWhere.FIRST_OFFSET
    consumer = PullConsumer(
        admin.ns.addrs,
        group,
        consume_from_where=where,
        instance_name="pymq-admin",
        poll_batch_size=min(count, 32),
        auto_commit=False,
        **ctx.security,
    )
    consumer.subscribe(topic, tags)
    got: list[MessageExt] = []
    async with consumer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while len(got) < count and loop.time() < deadline:
            batch = await consumer.poll(timeout=min(1.0, max(0.05, deadline - loop.time())))
            if batch:
                got.extend(batch[: count - len(got)])
                deadline = loop.time() + wait
        # Commit exactly what was printed: a later run continues after it.
        shown: dict[MessageQueue, int] = {}
        for m in got:
            mq = MessageQueue(topic, m.broker_name, m.queue_id)
            shown[mq] = max(shown.get(mq, 0), m.queue_offset + 1)
        if shown:
            await consumer.commit(shown)
    rows = [{**message_row(m), "body": preview(m.body, 80)} for m in got]
    emit(
        [{**m.to_dict(), "body": preview(m.body), "bodyBase64": base64.b64encode(m.body).decode()} for m in got],
        ctx.as_json,
        table(rows, [*MESSAGE_COLUMNS[:5], ("body", "BODY")]) if rows else "no message",
    )


def _tag_expression(value: str) -> str:
    """The broker's tag-expression parser, strictly: 'created paid' or 'a,b' would match nothing."""
    try:
        parse_tags_strict(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


# --- dead letters ---------------------------------------------------------------------------------------


@main.command("dlq-list")
@click.option("--group", required=True)
@click.option("--limit", default=1000, show_default=True)
@admin_command
async def dlq_list(admin: AdminClient, ctx: AdminContext, group: str, limit: int) -> None:
    """Messages in a group's dead-letter queue (%DLQ%<group>).

    \b
    Example:
      pymq-admin dlq-list --group order-service
    """
    msgs = await admin.dlq_list(group, limit)
    rows = [{**message_row(m), "originTopic": m.properties.get("RETRY_TOPIC")} for m in msgs]
    emit(
        rows,
        ctx.as_json,
        table(
            rows,
            [
                *MESSAGE_COLUMNS[:1],
                ("originTopic", "ORIGIN TOPIC"),
                *MESSAGE_COLUMNS[4:],
                ("reconsumeTimes", "RECONSUMES"),
            ],
        )
        if rows
        else "dead-letter queue is empty",
    )


@main.command("dlq-resend")
@click.option("--group", required=True)
@click.option("--id", "msg_ids", multiple=True, help="Message id to resend (repeatable).")
@click.option("--all", "resend_all", is_flag=True, help="Resend every dead letter of the group.")
@admin_command
async def dlq_resend(
    admin: AdminClient, ctx: AdminContext, group: str, msg_ids: tuple[str, ...], resend_all: bool
) -> None:
    """Put dead letters back on their original topic.

    \b
    Example:
      pymq-admin dlq-resend --group order-service --all
      pymq-admin dlq-resend --group order-service --id C0A8010100002A9F3B6E7110A3F20000
    """
    if bool(msg_ids) == resend_all:
        raise ClientError("give either --all or at least one --id")
    ids = await admin.dlq_resend(group, None if resend_all else list(msg_ids))
    emit({"group": group, "resent": ids}, ctx.as_json, f"resent {len(ids)} message(s) to their original topics")
