"""The Consumer groups pages (offsets, lag, clients, reset with a confirmation), Dead letters and Pending
(timers not yet due, transactions not yet decided)."""

from __future__ import annotations

import base64
import calendar
import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from pymq.client.admin import AdminClient
from pymq.dashboard import views
from pymq.dashboard.guard import check_mutation
from pymq.dashboard.state import admin_of, bounded_gather, flash, get_state, render
from pymq.errors import PymqError

#: reset targets the form offers, as the broker's timestamps (-1 latest, -2 earliest)
RESET_TARGETS = {"latest": -1, "earliest": -2}


async def groups_page(request: Request) -> Response:
    admin = admin_of(request)
    groups = sorted((await admin.group_list()).items())
    existing = set(await admin.topic_list())
    progress = await bounded_gather([_progress(admin, g) for g, _ in groups])
    letters = await bounded_gather([_stored(admin, f"%DLQ%{g}", existing) for g, _ in groups])
    rows = []
    for (group, config), p, dlq in zip(groups, progress, letters, strict=True):
        topics = sorted({r["topic"] for r in p["queues"] if not r["topic"].startswith("%RETRY%")})
        retry = sum(r["lag"] for r in p["queues"] if r["topic"].startswith("%RETRY%"))
        rows.append({"group": group, "config": config, "progress": p, "topics": topics, "retry": retry, "dlq": dlq})
    return render(request, "groups.html", rows=rows)


async def _stored(admin: AdminClient, topic: str, existing: set[str]) -> int:
    """How many messages ``topic`` holds (0 if it does not exist)."""
    if topic not in existing:
        return 0
    try:
        return sum(r["maxOffset"] - r["minOffset"] for r in await admin.topic_status(topic))
    except PymqError:
        return 0


async def _progress(admin: AdminClient, group: str) -> dict[str, Any]:
    try:
        return await admin.consumer_progress(group)
    except PymqError:
        return {"queues": [], "totalLag": 0, "totalInFlight": 0}


async def group_page(request: Request) -> Response:
    admin = admin_of(request)
    group = request.path_params["group"]
    progress = await admin.consumer_progress(group)
    try:
        connection: dict[str, Any] | None = await admin.consumer_connection(group)
    except PymqError:
        connection = None
    config = (await admin.group_list()).get(group)
    topics = sorted({r["topic"] for r in progress["queues"] if not r["topic"].startswith("%RETRY%")})
    return render(
        request, "group.html", group=group, progress=progress, connection=connection, config=config, topics=topics
    )


async def client_page(request: Request) -> Response:
    """One consumer client's running info (GET_CONSUMER_RUNNING_INFO, relayed by a broker): its owned queues'
    process state and, with ``?jstack=1``, its threads' and asyncio tasks' stacks."""
    group = request.path_params["group"]
    client_id = request.path_params["client_id"]
    jstack = request.query_params.get("jstack") in ("1", "yes", "true")
    error = None
    info: dict[str, Any] = {}
    try:
        info = await admin_of(request).consumer_running_info(group, client_id, jstack)
    except PymqError as exc:  # not connected, did not answer: said on the page, the link back stays
        error = str(exc)
    properties = {k: v for k, v in (info.get("properties") or {}).items()} if isinstance(info, dict) else {}
    return render(
        request,
        "client.html",
        group=group,
        client_id=client_id,
        jstack=jstack,
        error=error,
        info=info,
        properties=properties,
        rows=views.running_info_rows(info),
        status_code=200 if error is None else 502,
    )


def reset_timestamp(target: str, at: str) -> int:
    """The form's choice as the broker's timestamp: latest, earliest, or ``at`` (UTC, ``YYYY-MM-DDTHH:MM``)."""
    if target in RESET_TARGETS:
        return RESET_TARGETS[target]
    if target != "time":
        raise ValueError(f"target: {target!r} is not latest, earliest or time")
    try:
        parsed = time.strptime(at.strip()[:16], "%Y-%m-%dT%H:%M")
    except ValueError as exc:
        raise ValueError(f"time: {at!r} is not YYYY-MM-DDTHH:MM") from exc
    return calendar.timegm(parsed) * 1000


async def group_reset(request: Request) -> Response:
    """Step 1 shows what will change and asks to confirm; step 2 (``confirmed``) resets."""
    form = await request.form()
    check_mutation(request, form, read_only=get_state(request).config.read_only)
    group = request.path_params["group"]
    topic = str(form.get("topic") or "")
    target = str(form.get("target") or "")
    at = str(form.get("at") or "")
    try:
        timestamp = reset_timestamp(target, at)
    except ValueError as exc:
        flash(request, "error", str(exc))
        return RedirectResponse(f"/groups/{group}", 303)
    if form.get("confirmed") != "yes":
        return render(request, "reset_confirm.html", group=group, topic=topic, target=target, at=at)
    try:
        result = await admin_of(request).reset_offset(group, topic, timestamp)
    except PymqError as exc:
        flash(request, "error", f"offsets not reset: {exc}")
        return RedirectResponse(f"/groups/{group}", 303)
    queues = sum(len(t) for t in result.values())
    flash(request, "ok", f"group {group} reset on {topic} to {target} {at}".rstrip() + f" ({queues} queues)")
    return RedirectResponse(f"/groups/{group}", 303)


async def dlq_page(request: Request) -> Response:
    admin = admin_of(request)
    groups = sorted(t[len("%DLQ%") :] for t in await admin.topic_list() if t.startswith("%DLQ%"))
    group = request.query_params.get("group", "") or (groups[0] if groups else "")
    letters = await admin.dlq_list(group, limit=200) if group else []
    return render(request, "dlq.html", groups=groups, group=group, letters=letters)


async def dlq_export(request: Request) -> Response:
    """The group's dead letters as JSON lines (each message's fields, body in base64), a download."""
    group = request.query_params.get("group", "")
    letters = await admin_of(request).dlq_list(group)
    lines = [json.dumps({**m.to_dict(), "body": base64.b64encode(m.body).decode()}) for m in letters]
    return Response(
        "".join(line + "\n" for line in lines),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="DLQ-{group}.jsonl"'},
    )


async def producers_page(request: Request) -> Response:
    """Producer groups and their connected clients, per broker."""
    producers = await admin_of(request).producer_connections()
    return render(request, "producers.html", producers=sorted(producers.items()))


async def pending_page(request: Request) -> Response:
    """Timer messages not yet due, and half messages still waiting for a commit or rollback."""
    admin = admin_of(request)
    return render(
        request, "pending.html", timers=await admin.pending_timers(), half=await admin.pending_half_messages()
    )


async def dlq_resend(request: Request) -> Response:
    form = await request.form()
    check_mutation(request, form, read_only=get_state(request).config.read_only)
    group = str(form.get("group") or "")
    ids = [str(i) for i in form.getlist("msg_id")]
    if form.get("all") != "yes" and not ids:
        flash(request, "error", "select the dead letters to resend (or resend all)")
        return RedirectResponse(f"/dlq?group={group}", 303)
    try:
        resent = await admin_of(request).dlq_resend(group, None if form.get("all") == "yes" else ids)
    except PymqError as exc:
        flash(request, "error", f"not resent: {exc}")
        return RedirectResponse(f"/dlq?group={group}", 303)
    flash(request, "ok", f"resent {len(resent)} dead letter(s) of {group}: {', '.join(resent)}")
    return RedirectResponse(f"/dlq?group={group}", 303)


routes = [
    Route("/groups", groups_page),
    Route("/groups/{group}", group_page),
    Route("/groups/{group}/reset", group_reset, methods=["POST"]),
    Route("/groups/{group}/clients/{client_id}", client_page),
    Route("/dlq", dlq_page),
    Route("/dlq/resend", dlq_resend, methods=["POST"]),
    Route("/dlq/export", dlq_export),
    Route("/pending", pending_page),
    Route("/producers", producers_page),
]
