"""The Charts page (from the dashboard's own polls), the ACL accounts (read, and edited where the brokers
can write their ACL file) and the ACL login/logout."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from pymq.client import broker_api
from pymq.client.admin import AdminClient
from pymq.dashboard import views
from pymq.dashboard.guard import Account, check_mutation
from pymq.dashboard.history import sparkline
from pymq.dashboard.state import admin_of, flash, get_state, render
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
    """The ACL accounts and their rights (admin accounts only; secret keys are never sent), and where the
    brokers can write their ACL file, the form that creates or edits one (``?edit=KEY`` fills it in)."""
    info = await admin_of(request).acl_accounts()
    editing = request.query_params.get("edit", "")
    current = next((a for a in info.get("accounts") or [] if a.get("accessKey") == editing), None)
    return render(
        request,
        "accounts.html",
        info=info,
        editing=current is not None,
        values=views.acl_form_values(current),
        perms=views.ACL_PERMS,
    )


async def account_save(request: Request) -> Response:
    """Create or update an account in every broker's ACL file (an empty secret keeps the account's)."""
    form = await request.form()
    check_mutation(request, form, read_only=get_state(request).config.read_only)
    try:
        account = views.acl_account_from_form(form)
    except ValueError as exc:
        flash(request, "error", f"account not saved: {exc}")
        return RedirectResponse("/accounts", 303)
    key = account["accessKey"]
    try:
        result = await admin_of(request).acl_update(account)
    except PymqError as exc:
        flash(request, "error", f"account {key} not saved: {exc}")
        return RedirectResponse(f"/accounts?edit={quote(key)}", 303)
    created = any(r.get("created") for r in result.values())
    done = ", ".join(w for w, r in result.items() if "error" not in r)
    flash(request, *views.per_broker_text(f"account {key} {'created' if created else 'updated'} on {done}", result))
    return RedirectResponse("/accounts", 303)


async def account_delete(request: Request) -> Response:
    """Step 1 asks to confirm; step 2 (``confirmed``) deletes the account from every broker's ACL file."""
    form = await request.form()
    check_mutation(request, form, read_only=get_state(request).config.read_only)
    key = str(form.get("access_key") or "")
    if form.get("confirmed") != "yes":
        return render(request, "account_delete.html", access_key=key)
    try:
        result = await admin_of(request).acl_delete(key)
    except PymqError as exc:
        flash(request, "error", f"account {key} not deleted: {exc}")
        return RedirectResponse("/accounts", 303)
    done = ", ".join(w for w, r in result.items() if r.get("deleted")) or "no broker (it was not there)"
    flash(request, *views.per_broker_text(f"account {key} deleted from {done}", result))
    return RedirectResponse("/accounts", 303)


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
    Route("/accounts/save", account_save, methods=["POST"]),
    Route("/accounts/delete", account_delete, methods=["POST"]),
    Route("/login", login_page),
    Route("/login", login_post, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
