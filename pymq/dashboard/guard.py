"""Who may do what: sessions, the optional ACL login, CSRF tokens on every mutation, read-only mode.

The session cookie is signed (Starlette's SessionMiddleware) and holds only a session id and
the CSRF token; an account's secret key stays in this process (:class:`Sessions`), never in a
cookie or a page.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from pymq.client.admin import AdminClient


class Refused(Exception):
    """A request the dashboard will not carry out (HTTP 403 with this reason)."""


@dataclass
class Account:
    access_key: str
    admin: AdminClient
    #: the keys the account's producer signs with (the test-message form)
    security: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Sessions:
    """Logged-in accounts by session id (in memory: a restart logs everyone out)."""

    accounts: dict[str, Account] = field(default_factory=dict)

    def add(self, account: Account) -> str:
        sid = secrets.token_urlsafe(24)
        self.accounts[sid] = account
        return sid

    def get(self, sid: str | None) -> Account | None:
        return self.accounts.get(sid) if sid else None

    async def drop(self, sid: str | None) -> None:
        account = self.accounts.pop(sid, None) if sid else None
        if account is not None:
            await account.admin.close()

    async def close(self) -> None:
        for sid in list(self.accounts):
            await self.drop(sid)


def csrf_token(request: Request) -> str:
    """This session's CSRF token (made on first use); every form posts it back."""
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = secrets.token_urlsafe(24)
    return str(token)


def check_mutation(request: Request, form: Any, *, read_only: bool) -> None:
    """Refuse a mutation without this session's CSRF token, or any mutation in read-only mode."""
    sent = str(form.get("csrf_token") or "")
    expected = str(request.session.get("csrf") or "")
    if not sent or not expected or not secrets.compare_digest(sent, expected):
        raise Refused("missing or wrong CSRF token: reload the page and try again")
    if read_only:
        raise Refused("this dashboard is read-only (--read-only)")
