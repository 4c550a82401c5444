"""The dashboard's Starlette app: routes, sessions, error pages, and the lifespan that owns the
admin client and the chart poller."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from pymq.client.admin import AdminClient
from pymq.config import DashboardConfig
from pymq.dashboard import pages_cluster, pages_groups, pages_messages, pages_misc, pages_topics
from pymq.dashboard.guard import Refused
from pymq.dashboard.history import History
from pymq.dashboard.poller import Poller
from pymq.dashboard.state import HERE, DashboardState, LoginRequired, render
from pymq.errors import PymqError

log = logging.getLogger("pymq.dashboard")


def create_app(config: DashboardConfig) -> Starlette:
    """The ASGI app for one cluster (its nameservers in ``config.namesrv_addrs``)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        history = History(config.history_seconds)
        own = {"access_key": config.access_key, "secret_key": config.secret_key} if config.access_key else {}
        state = DashboardState(
            config, AdminClient(config.namesrv_addrs, timeout=config.rpc_timeout_seconds, **own), history
        )
        poller = Poller(state.admin, history, config.poll_interval_seconds)
        app.state.dashboard = state
        app.state.poller = poller
        poller.start()
        try:
            yield
        finally:
            await poller.close()
            await state.sessions.close()
            await state.admin.close()

    routes = [
        *pages_cluster.routes,
        *pages_topics.routes,
        *pages_messages.routes,
        *pages_groups.routes,
        *pages_misc.routes,
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [
        Middleware(
            SessionMiddleware,
            secret_key=config.session_secret or secrets.token_urlsafe(32),
            session_cookie="pymq_dashboard",
            same_site="strict",
        )
    ]
    handlers = {
        Refused: refused,
        LoginRequired: login_required,
        PymqError: cluster_error,
        HTTPException: http_error,
        Exception: server_error,
    }
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan, exception_handlers=handlers)


async def refused(request: Request, exc: Exception) -> Response:
    return render(request, "error.html", status_code=403, title="Refused", message=str(exc))


async def login_required(request: Request, exc: Exception) -> Response:
    return RedirectResponse("/login", 303)


async def cluster_error(request: Request, exc: Exception) -> Response:
    """An admin RPC failed (unknown topic, no route, refused by ACL ...): say so on the page."""
    return render(request, "error.html", status_code=502, title="The cluster said no", message=str(exc))


async def server_error(request: Request, exc: Exception) -> Response:
    """A bug of ours: logged with its traceback, and a page that says so (not a bare 500)."""
    log.error("dashboard page %s failed", request.url.path, exc_info=exc)
    return render(
        request, "error.html", status_code=500, title="Dashboard error", message=f"{type(exc).__name__}: {exc}"
    )


async def http_error(request: Request, exc: Exception) -> Response:
    code = exc.status_code if isinstance(exc, HTTPException) else 500
    return render(
        request, "error.html", status_code=code, title=f"HTTP {code}", message=str(getattr(exc, "detail", exc))
    )
