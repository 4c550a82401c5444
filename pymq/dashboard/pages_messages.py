"""The Messages pages: find by key or by id, one message's properties, body views and trail, and its resend
to a consumer group (CONSUME_MESSAGE_DIRECTLY)."""

from __future__ import annotations

import calendar
import time
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from pymq.client.admin import AdminClient
from pymq.dashboard import views
from pymq.dashboard.guard import check_mutation
from pymq.dashboard.state import admin_of, flash, get_state, render
from pymq.errors import PymqError, QueryNotFoundError
from pymq.protocol.message import MessageExt, Prop


async def messages_page(request: Request) -> Response:
    """The search form, and with ``topic`` and ``key`` the messages with that key."""
    admin = admin_of(request)
    topic = request.query_params.get("topic", "").strip()
    key = request.query_params.get("key", "").strip()
    found: list[MessageExt] = []
    error = None
    if topic and key:
        try:
            found = await admin.query_key(topic, key, max_num=64)
        except PymqError as exc:
            error = str(exc)
    return render(
        request, "messages.html", topic=topic, key=key, found=found, searched=bool(topic and key), error=error
    )


PAGE_SIZE = 50


def parse_utc(text: str, field: str) -> int:
    """A form's ``YYYY-MM-DDTHH:MM`` (UTC) as epoch milliseconds."""
    try:
        return calendar.timegm(time.strptime(text.strip()[:16], "%Y-%m-%dT%H:%M")) * 1000
    except ValueError as exc:
        raise ValueError(f"{field}: {text!r} is not YYYY-MM-DDTHH:MM") from exc


async def messages_by_time(request: Request) -> Response:
    """A topic's messages stored in a time range (UTC), a page at a time."""
    admin = admin_of(request)
    params = request.query_params
    topic = params.get("topic", "").strip()
    begin, end = params.get("begin", ""), params.get("end", "")
    try:
        begin_ms = parse_utc(begin, "from")
        end_ms = parse_utc(end, "to") + 59_999 if end else int(time.time() * 1000)
    except ValueError as exc:
        return render(request, "messages.html", status_code=400, topic=topic, key="", found=[], error=str(exc))
    found = await admin.messages_between(topic, begin_ms, end_ms)
    page = views.paginate(found, int(params.get("page", "1") or 1), PAGE_SIZE)
    return render(
        request, "messages.html", topic=topic, key="", found=page.items, page=page, begin=begin, end=end, ranged=True
    )


async def message_page(request: Request) -> Response:
    """One message by id (offset id, or unique id with its topic): properties, body, trail."""
    admin = admin_of(request)
    msg_id = request.query_params.get("id", "").strip()
    topic = request.query_params.get("topic", "").strip() or None
    try:
        msg = await admin.query_id(msg_id, topic)
    except QueryNotFoundError as exc:
        return render(request, "messages.html", status_code=404, topic=topic or "", key="", found=[], error=str(exc))
    group = request.query_params.get("group", "").strip()
    try:
        offsets = await admin.consumer_offsets(msg.broker_name) if msg.broker_name else {}
    except PymqError:  # no master right now: the page says nothing of consumption
        offsets = {}
    return render(
        request,
        "message.html",
        msg=msg,
        body=views.body_views(msg.body),
        properties=sorted(msg.properties.items()),
        trail=await trail(admin, msg),
        notes=views.trail_notes(msg.properties),
        consumed=views.consumed_by(offsets, msg.topic, msg.queue_id, msg.queue_offset),
        groups=sorted(await admin.group_list()),
        group=group,
        clients=await _clients(admin, group) if group else [],
    )


async def _clients(admin: AdminClient, group: str) -> list[str]:
    """The group's connected client ids (none when no broker knows the group)."""
    try:
        connection = await admin.consumer_connection(group)
    except PymqError:
        return []
    return sorted({str(c["clientId"]) for c in connection.get("connections") or []})


async def message_resend(request: Request) -> Response:
    """CONSUME_MESSAGE_DIRECTLY: a client of the chosen group (or any of its clients) consumes this message
    with its listener now; the client's answer is shown. No offset moves."""
    form = await request.form()
    check_mutation(request, form, read_only=get_state(request).config.read_only)
    msg_id = str(form.get("id") or "")
    group = str(form.get("group") or "").strip()
    client_id = str(form.get("client_id") or "").strip() or None
    back = f"/messages/view?id={quote(msg_id)}&group={quote(group)}"
    if not group:
        flash(request, "error", "choose the consumer group to resend to")
        return RedirectResponse(back, 303)
    try:
        result = await admin_of(request).consume_message_directly(group, msg_id, client_id)
    except PymqError as exc:
        flash(request, "error", f"not resent to {group}: {exc}")
        return RedirectResponse(back, 303)
    flash(request, "ok", views.consume_directly_text(group, result))
    return RedirectResponse(back, 303)


async def message_body(request: Request) -> Response:
    """The raw body as a download."""
    msg = await admin_of(request).query_id(
        request.query_params.get("id", ""), request.query_params.get("topic") or None
    )
    return Response(
        msg.body,
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{msg.msg_id}.bin"'},
    )


async def trail(admin: AdminClient, msg: MessageExt) -> list[dict[str, Any]]:
    """Where the message went after it was stored: its copies in each group's retry and dead-letter
    topics (found by its unique id, which they keep), oldest first."""
    uniq = msg.properties.get(Prop.UNIQ_KEY)
    if not uniq or msg.topic.startswith(("%RETRY%", "%DLQ%")):
        return []
    topics = [t for t in await admin.topic_list() if t.startswith(("%RETRY%", "%DLQ%"))]
    steps: list[dict[str, Any]] = []
    for topic in sorted(topics):
        try:
            copies = await admin.query_key(topic, uniq)
        except PymqError:
            continue
        for c in copies:
            steps.append(
                {
                    "kind": "dead letter" if topic.startswith("%DLQ%") else "retry",
                    "group": topic.split("%")[2],
                    "topic": topic,
                    "offsetMsgId": c.offset_msg_id,
                    "reconsumeTimes": c.reconsume_times,
                    "storeTimestamp": c.store_timestamp,
                }
            )
    return sorted(steps, key=lambda s: s["storeTimestamp"])


routes = [
    Route("/messages", messages_page),
    Route("/messages/view", message_page),
    Route("/messages/range", messages_by_time),
    Route("/messages/body", message_body),
    Route("/messages/resend", message_resend, methods=["POST"]),
]
