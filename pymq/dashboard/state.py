"""What every request handler shares: the config, the admin clients, the history and the templates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from pymq.client.admin import AdminClient
from pymq.config import DashboardConfig
from pymq.dashboard import views
from pymq.dashboard.guard import Sessions, csrf_token
from pymq.dashboard.history import History

HERE = Path(__file__).parent
T = TypeVar("T")
#: admin calls one page (or one poll) keeps in flight at once
MAX_PARALLEL_CALLS = 16


async def bounded_gather(calls: list[Awaitable[T]], limit: int = MAX_PARALLEL_CALLS) -> list[T]:
    """Await ``calls`` with at most ``limit`` in flight; results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))


class LoginRequired(Exception):
    """The dashboard asks for a login and this session has none (redirect to /login)."""


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.filters.update(
        ms=views.fmt_ms,
        size=views.fmt_bytes,
        duration=views.fmt_duration,
        perm=views.perm_string,
        preview=views.preview,
    )
    return templates


@dataclass
class DashboardState:
    config: DashboardConfig
    admin: AdminClient
    history: History
    templates: Jinja2Templates = field(default_factory=make_templates)
    sessions: Sessions = field(default_factory=Sessions)

    def security(self, access_key: str | None = None, secret_key: str | None = None) -> dict[str, Any]:
        ak, sk = access_key or self.config.access_key, secret_key or self.config.secret_key
        return {"access_key": ak, "secret_key": sk} if ak and sk else {}


def get_state(request: Request) -> DashboardState:
    state: DashboardState = request.app.state.dashboard
    return state


def admin_of(request: Request) -> AdminClient:
    """The admin client this request acts with: the logged-in account's, or the dashboard's own."""
    state = get_state(request)
    if not state.config.login:
        return state.admin
    account = state.sessions.get(request.session.get("sid"))
    if account is None:
        raise LoginRequired()
    return account.admin


def flash(request: Request, kind: str, message: str) -> None:
    """A message for the next page this session sees (after a redirect)."""
    request.session["flash"] = [kind, message]


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    state = get_state(request)
    account = state.sessions.get(request.session.get("sid"))
    context.update(
        csrf=csrf_token(request),
        read_only=state.config.read_only,
        login=state.config.login,
        user=account.access_key if account else None,
        flash=request.session.pop("flash", None),
        nav=template.split(".")[0],
    )
    return state.templates.TemplateResponse(request, template, context, status_code=status_code)
