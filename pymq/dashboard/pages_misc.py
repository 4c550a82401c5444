"""The Charts page (from the dashboard's own polls) and the ACL login/logout."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from pymq.client import broker_api
from pymq.client.admin import AdminClient
from pymq.dashboard.guard import Account, check_mutation
from pymq.dashboard.history import sparkline
from pymq.dashboard.state import admin_of, get_state, render
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command

#: per-topic charts shown: the busiest topics of the last hour
TOPIC_CHARTS = 20


async def charts_page(request: Request) -> Response:
    admin_of(request)  # logged in (with login on)
    history = get_state(request).history
    charts = []
    for prefix, title in (("put:", "TPS in"), ("get:", "TPS out"), ("lag:", "lag")):
        for name in history.names(prefix):
            charts.append({"name": name, "title": f"{title} {name[len(prefix) :]}", **sparkline(history.points(name))})
    busiest = sorted(history.names("tput:"), key=lambda n: -max(v for _, v in history.points(n)))[:TOPIC_CHARTS]
    for name in sorted(busiest):
        topic = name[len("tput:") :]
        for prefix, title in (("tput:", "TPS in"), ("tget:", "TPS out")):
            series = prefix + topic
            charts.append({"name": series, "title": f"{title} topic {topic}", **sparkline(history.points(series))})
    config = get_state(request).config
    return render(
        request, "charts.html", charts=charts, interval=config.poll_interval_seconds, grafana=config.grafana_url
    )


async def accounts_page(request: Request) -> Response:
    """The ACL accounts and their rights (admin accounts only; secret keys are never sent)."""
    info = await admin_of(request).acl_accounts()
    return render(request, "accounts.html", info=info)


async def login_page(request: Request) -> Response:
    return render(request, "login.html", error=None)


async def login_post(request: Request) -> Response:
    """Check the keys by making a signed call with them (a wrong key is refused by the cluster)."""
    state = get_state(request)
    form = await request.form()
    check_mutation(request, form, read_only=False)
    access_key = str(form.get("access_key") or "").strip()
    secret_key = str(form.get("secret_key") or "")
    security = state.security(access_key, secret_key)
    admin = AdminClient(state.config.namesrv_addrs, timeout=state.config.rpc_timeout_seconds, **security)
    try:
        for addr in (await admin.master_addrs()).values():
            await admin.broker_call(addr, _whoami())
    except PymqError as exc:
        await admin.close()
        return render(request, "login.html", status_code=403, error=f"login refused: {exc}")
    await state.sessions.drop(request.session.get("sid"))
    request.session["sid"] = state.sessions.add(Account(access_key, admin, security))
    return RedirectResponse("/", 303)


def _whoami() -> Command:
    """A request any authenticated account may make: the login's proof that the keys are right."""
    return broker_api.plain(RequestCode.GET_ALL_TOPIC_CONFIG)


async def logout(request: Request) -> Response:
    form = await request.form()
    check_mutation(request, form, read_only=False)
    await get_state(request).sessions.drop(request.session.pop("sid", None))
    return RedirectResponse("/login", 303)


routes = [
    Route("/charts", charts_page),
    Route("/accounts", accounts_page),
    Route("/login", login_page),
    Route("/login", login_post, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
