"""The Topics pages: the list (search, paging, system topics hidden), create, one topic's route and
per-queue offsets, and the "send a test message" form."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from pymq.client.producer import Producer
from pymq.dashboard import views
from pymq.dashboard.guard import check_mutation
from pymq.dashboard.state import admin_of, flash, get_state, render
from pymq.errors import PymqError
from pymq.protocol.message import Message


def parse_attributes(text: str) -> dict[str, str]:
    """The form's ``key=value, key=value`` topic attributes (e.g. ``priority.levels=4``)."""
    out = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.lstrip("+").partition("=")
        if not eq or not key.strip():
            raise ValueError(f"attributes: {item!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


PAGE_SIZE = 50


async def topics_page(request: Request) -> Response:
    admin = admin_of(request)
    q = request.query_params.get("q", "").strip()
    show_system = request.query_params.get("system") == "1"
    configs = await admin.topic_configs()
    names = set(configs) | set(await admin.topic_list())
    clusters = set((await admin.cluster_info()).get("clusterAddrTable") or {})
    shown = sorted(
        n for n in names if (show_system or not views.is_system_topic(n, clusters)) and q.lower() in n.lower()
    )
    page = views.paginate(shown, int(request.query_params.get("page", "1") or 1), PAGE_SIZE)
    rows = [{"name": n, **configs.get(n, {})} for n in page.items]
    return render(request, "topics.html", page=page, rows=rows, q=q, show_system=show_system)


async def topic_create(request: Request) -> Response:
    form = await request.form()
    check_mutation(request, form, read_only=get_state(request).config.read_only)
    topic = str(form.get("topic") or "").strip()
    try:
        queues = int(str(form.get("queues") or "8"))
        perm = views.parse_perm(bool(form.get("perm_read")), bool(form.get("perm_write")))
        attributes = parse_attributes(str(form.get("attributes") or ""))
    except ValueError as exc:
        flash(request, "error", f"topic {topic!r} not created: {exc}")
        return RedirectResponse("/topics", 303)
    try:
        targets = await admin_of(request).create_topic(
            topic, queues, perm=perm, order=bool(form.get("order")), attributes=attributes or None
        )
    except PymqError as exc:
        flash(request, "error", f"topic {topic!r} not created: {exc}")
        return RedirectResponse("/topics", 303)
    flash(request, "ok", f"topic {topic} created on {', '.join(targets)}")
    return RedirectResponse(f"/topics/{topic}", 303)


async def topic_delete(request: Request) -> Response:
    """Step 1 asks to confirm; step 2 (``confirmed``) deletes the topic from its brokers and the nameservers."""
    form = await request.form()
    check_mutation(request, form, read_only=get_state(request).config.read_only)
    topic = request.path_params["topic"]
    if form.get("confirmed") != "yes":
        return render(request, "delete_confirm.html", topic=topic)
    try:
        holders = await admin_of(request).delete_topic(topic)
    except PymqError as exc:
        flash(request, "error", f"topic {topic!r} not deleted: {exc}")
        return RedirectResponse(f"/topics/{topic}", 303)
    flash(request, "ok", f"topic {topic} deleted from {', '.join(holders) or 'the nameservers'}")
    return RedirectResponse("/topics", 303)


async def topic_page(request: Request) -> Response:
    admin = admin_of(request)
    topic = request.path_params["topic"]
    route = await admin.topic_route(topic)
    status = await admin.topic_status(topic)
    return render(request, "topic.html", topic=topic, route=route, status=status)


async def topic_send(request: Request) -> Response:
    """Send one message with the form's body, tags and keys; show its ids on the topic page."""
    form = await request.form()
    state = get_state(request)
    check_mutation(request, form, read_only=state.config.read_only)
    topic = request.path_params["topic"]
    admin_of(request)  # logged in (with login on)
    account = state.sessions.get(request.session.get("sid"))
    security = account.security if account else state.security()
    message = Message(
        topic,
        str(form.get("body") or "").encode(),
        tags=str(form.get("tags") or "") or None,
        keys=str(form.get("keys") or "") or None,
    )
    try:
        async with Producer(state.config.namesrv_addrs, "PYMQ_DASHBOARD_PRODUCER", **security) as producer:
            result = await producer.send(message)
    except PymqError as exc:
        flash(request, "error", f"not sent: {exc}")
        return RedirectResponse(f"/topics/{topic}", 303)
    flash(
        request,
        "ok",
        f"sent: msgId {result.msg_id} offsetMsgId {result.offset_msg_id} queue {result.message_queue.queueId}",
    )
    return RedirectResponse(f"/topics/{topic}", 303)


routes = [
    Route("/topics", topics_page),
    Route("/topics/create", topic_create, methods=["POST"]),
    Route("/topics/{topic}", topic_page),
    Route("/topics/{topic}/send", topic_send, methods=["POST"]),
    Route("/topics/{topic}/delete", topic_delete, methods=["POST"]),
]
