"""ACL enforcement: a dispatcher interceptor that checks each request's signature and permissions.

Registered only when ACL is enabled (a daemon without ACL pays nothing). Per request: the
peer's address against the white lists, the account by access key, the timestamp window,
one HMAC over the canonical form (:mod:`pymq.security.signing`), the replay guard, then the
code's requirement (:mod:`pymq.security.permissions`; a field the request may leave out is
found by the server's resolver for that code: the broker's reads END_TRANSACTION's half
message). A refusal answers NO_PERMISSION with a short reason and logs one (rate-limited)
line; it never says which accounts exist or what the signature should have been.

The ACL file is re-read when its modification time changes (:meth:`AclInterceptor.reload_if_changed`,
run periodically by the daemon, off the event loop); a file that cannot be used is logged
and the rules in force are kept.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from pymq.logs import RateLimitedLog, get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.security import remoting_signing
from pymq.security.acl import ANY, PUB, SUB, Account, AclConfig, AclFileError, allows, load_acl
from pymq.security.permissions import (
    TOPIC,
    BodyNotUnderstood,
    Resolver,
    ResourceNotFound,
    ResourceNotNamed,
    needs,
    requirement,
)
from pymq.security.session import (
    CHALLENGE,
    CHALLENGE_ATTR,
    SESSION_ATTR,
    SESSION_CHALLENGE,
    SESSION_OPEN,
    Session,
    challenge_matches,
    is_tls,
    new_challenge,
)
from pymq.security.signing import ACCESS_KEY, ReplayGuard, SignatureError, verify
from pymq.transport.channel import Channel
from pymq.transport.interceptor import Interceptor

log = get_logger("security.acl")

#: ``authenticated_as`` of a white-listed peer: no signature and no permission checks (as RocketMQ)
WHITE = "\x00white"

#: the remark of every refusal that must not tell an unknown key from a wrong secret
BAD_CREDENTIALS = "bad credentials"


def _perm_name(perm: int) -> str:
    return {PUB: "PUB", SUB: "SUB", ANY: "PUB or SUB"}.get(perm, "PUB|SUB")


def peer_ip(remote_addr: str) -> str:
    return remote_addr.rpartition(":")[0] or remote_addr


class AclInterceptor(Interceptor):
    """Refuses unsigned, wrongly signed, expired, replayed and under-privileged requests."""

    def __init__(
        self,
        path: str | Path,
        *,
        replay_window_seconds: float = 60.0,
        replay_cache_entries: int = 1_000_000,
        server: str = "rpc",
        now_ms: Callable[[], int] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        resolvers: Mapping[int, Resolver] | None = None,
    ) -> None:
        self.path = Path(path)
        #: the rules in force (replaced whole on reload)
        self.acl: AclConfig = load_acl(self.path)
        self._mtime = self._stat()
        self.window_ms = int(replay_window_seconds * 1000)
        self.replay = ReplayGuard(replay_window_seconds, replay_cache_entries)
        self.server = server
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._monotonic = monotonic
        self._limited = RateLimitedLog(log, interval=10.0)
        #: per request code, what finds a field the request may leave out (only called when it does)
        self.resolvers: Mapping[int, Resolver] = resolvers or {}
        #: requests refused since start (tests and metrics)
        self.refused = 0

    # --- per request ------------------------------------------------------------------------------------

    def before(self, request: Command, channel: Channel) -> Command | None:
        try:
            return self._check(request, channel)
        except BodyNotUnderstood as exc:
            return self._refuse(request, channel, "body", f"request body not understood: {exc}")
        except ResourceNotNamed as exc:
            remark = f"{exc} ({RequestCode(request.code).name} needs it under ACL)"
            return self._refuse(request, channel, "unnamed", remark)
        except ResourceNotFound as exc:
            return self._refuse(request, channel, "unresolved", str(exc))
        except Exception as exc:  # hostile input must never become a SYSTEM_ERROR with a traceback per request
            return self._refuse(request, channel, "malformed", "malformed request", error=type(exc).__name__)

    def _check(self, request: Command, channel: Channel) -> Command | None:
        vouched = getattr(channel, "authenticated_as", None)
        if vouched is not None:  # a front end checked this request's own signature (4.x remoting)
            return None if vouched is WHITE else self._permitted(request, channel, vouched)
        if ACCESS_KEY not in request.ext:
            session = channel.attrs.get(SESSION_ATTR)
            if session is not None:  # unsigned on a session's connection: the session's account
                return self._in_session(request, channel, session)
            if request.code == SESSION_CHALLENGE:
                return self._challenge(request, channel)
        elif request.code == SESSION_CHALLENGE:  # (a client may sign it: no matter)
            return self._challenge(request, channel)
        claimed = self._claimed(request, channel)
        if isinstance(claimed, Command):
            return claimed
        if not isinstance(claimed, tuple):
            return None  # WHITE: a white-listed peer needs no signature
        access_key, account = claimed
        try:
            sig = verify(request, account.secret_key, self._now_ms(), self.window_ms)
        except SignatureError as exc:
            reason = str(exc)
            if reason == "signature mismatch":
                return self._refuse(request, channel, "credentials", BAD_CREDENTIALS, why=reason, access_key=access_key)
            return self._refuse(request, channel, "timestamp", reason, access_key=access_key)
        if self.replay.seen(sig, self._monotonic()):
            return self._refuse(request, channel, "replay", "replayed request", access_key=access_key)
        if request.code == SESSION_OPEN:
            return self._open_session(request, channel, access_key, account)
        return self._permitted(request, channel, access_key)

    # --- sessions (pymq.security.session) ------------------------------------------------------------------

    def _challenge(self, request: Command, channel: Channel) -> Command:
        """SESSION_CHALLENGE: a fresh challenge for this connection (TLS only)."""
        if not is_tls(channel):
            return self._refuse(request, channel, "session", "sessions need a TLS connection")
        challenge = channel.attrs[CHALLENGE_ATTR] = new_challenge()
        return request.response(ext={CHALLENGE: challenge})

    def _open_session(self, request: Command, channel: Channel, access_key: str, account: Account) -> Command:
        """SESSION_OPEN, its signature checked: bind the account to this connection if the request
        carries the challenge this connection was given (used up either way)."""
        issued = channel.attrs.pop(CHALLENGE_ATTR, None)
        if not is_tls(channel):
            return self._refuse(request, channel, "session", "sessions need a TLS connection", access_key=access_key)
        if not challenge_matches(issued, request.ext.get(CHALLENGE)):
            remark = "session challenge not issued on this connection"
            return self._refuse(request, channel, "session", remark, access_key=access_key)
        channel.attrs[SESSION_ATTR] = Session(access_key, account.secret_key)
        return request.response()

    def _in_session(self, request: Command, channel: Channel, session: Session) -> Command | None:
        """An unsigned request on a session's connection: the white lists and permissions as for a
        signed one of its account; a changed secret key or a removed account ends the session."""
        acl = self.acl
        if acl.global_white and acl.is_globally_white(peer_ip(channel.remote_addr)):
            return None
        account = acl.accounts.get(session.access_key)
        if account is None or account.secret_key != session.secret_key:
            # The key it proved is no longer valid: close the connection (its requests were not run;
            # the client reconnects and proves the current key, or is refused).
            del channel.attrs[SESSION_ATTR]
            refusal = self._refuse(request, channel, "session", "session ended: the account changed")
            channel.close()
            return refusal
        if account.white_remote and account.is_white(peer_ip(channel.remote_addr)):
            return None
        return self._permitted(request, channel, session.access_key)

    def _claimed(self, request: Command, channel: Channel) -> tuple[str, Account] | str | Command:
        """Who the request says it is, before its signature is checked: (access key, account), :data:`WHITE`
        for a white-listed peer (global, or the account's: RocketMQ asks no signature of it), or a refusal."""
        acl = self.acl
        ip = peer_ip(channel.remote_addr)
        if acl.global_white and acl.is_globally_white(ip):
            return WHITE
        access_key = request.ext.get(ACCESS_KEY)
        if not isinstance(access_key, str) or not access_key:
            return self._refuse(request, channel, "unsigned", "request not signed")
        account = acl.accounts.get(access_key)
        if account is None:
            why = "unknown access key"
            return self._refuse(request, channel, "credentials", BAD_CREDENTIALS, why=why, access_key=access_key)
        if account.white_remote and account.is_white(ip):
            return WHITE
        return access_key, account

    def _permitted(self, request: Command, channel: Channel, access_key: str) -> Command | None:
        """The request code's requirement against the account's permissions (signature already checked)."""
        account = self.acl.accounts.get(access_key)
        if account is None:  # removed by a reload since it was vouched for
            return self._refuse(request, channel, "credentials", BAD_CREDENTIALS, why="unknown access key")
        req = requirement(request.code)
        if req.admin and not account.admin:
            return self._refuse(request, channel, "admin", "admin permission required", access_key=access_key)
        for kind, name, perm in needs(req, request, self.resolvers):
            if kind == TOPIC:
                if not allows(perm, account.topic_perm(name)):
                    remark = f"no {_perm_name(perm)} permission on topic {name}"
                    return self._refuse(request, channel, "permission", remark, access_key=access_key)
            elif not allows(perm, account.group_perm(name)):
                remark = f"no {_perm_name(perm)} permission on group {name}"
                return self._refuse(request, channel, "permission", remark, access_key=access_key)
        return None

    def authenticate_remoting(self, request: Command, channel: Channel) -> str | Command:
        """A 4.x client's request (AclClientRPCHook signature): the access key it is signed by, :data:`WHITE`
        for a white-listed peer, or a NO_PERMISSION answer. Permissions are checked later, on the
        native request it becomes (the channel carries the key as ``authenticated_as``)."""
        try:
            claimed = self._claimed(request, channel)
            if not isinstance(claimed, tuple):
                return claimed  # WHITE or a refusal
            access_key, account = claimed
            if not remoting_signing.verify(request.ext, request.body_bytes(), account.secret_key):
                why = "signature mismatch"
                return self._refuse(request, channel, "credentials", BAD_CREDENTIALS, why=why, access_key=access_key)
            return access_key
        except Exception as exc:  # hostile input: a refusal, never a traceback
            return self._refuse(request, channel, "malformed", "malformed request", error=type(exc).__name__)

    def session_handlers(self) -> dict[int, Callable[[Command, Channel], Command]]:
        """The routes of the session requests (register them where this interceptor runs first).

        The interceptor answers both itself; a handler is reached only by a white-listed peer,
        which needs no session (it signs nothing): refused, so a client keeps its usual way."""

        def white(request: Command, _channel: Channel) -> Command:
            return request.response(ResponseCode.NO_PERMISSION, "a white-listed peer needs no session")

        return {SESSION_CHALLENGE: white, SESSION_OPEN: white}

    def remoting_interceptor(self) -> Interceptor:
        """For a dispatcher of 4.x requests whose codes and header names are pymq's own (the nameserver's):
        the remoting signature, then the same permission checks."""
        return _RemotingAcl(self)

    def _refuse(self, request: Command, channel: Channel, kind: str, remark: str, **fields: object) -> Command:
        """NO_PERMISSION with ``remark``; one log line per ``kind`` per 10 s at most (a flood stays quiet)."""
        self.refused += 1
        self._limited.log(
            "warning",
            f"acl_refused_{kind}",
            server=self.server,
            code=request.code,
            peer=channel.remote_addr,
            reason=remark,
            **fields,
        )
        return request.response(ResponseCode.NO_PERMISSION, remark)

    # --- reload -------------------------------------------------------------------------------------------

    def _stat(self) -> float | None:
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return None

    def reload_now(self, *, force: bool = False) -> bool:
        """Re-read the file if its mtime changed, or ``force`` (blocking: call it off the event loop).
        True if replaced."""
        mtime = self._stat()
        if mtime is None or (mtime == self._mtime and not force):
            return False
        try:
            acl = load_acl(self.path)
        except AclFileError as exc:
            self._mtime = mtime  # log once per bad version, not every poll
            log.error("acl_reload_failed_keeping_previous_rules", server=self.server, reason=str(exc))
            return False
        self._mtime = mtime
        self.acl = acl
        log.info("acl_reloaded", server=self.server, path=str(self.path), accounts=len(acl.accounts))
        return True

    async def reload_if_changed(self, *, force: bool = False) -> bool:
        """:meth:`reload_now` in a thread (the event loop never waits on the disk)."""
        return await asyncio.to_thread(self.reload_now, force=force)


class _RemotingAcl(Interceptor):
    """:meth:`AclInterceptor.remoting_interceptor`: one object, the ACL file's reloads included."""

    def __init__(self, acl: AclInterceptor) -> None:
        self.acl = acl

    def before(self, request: Command, channel: Channel) -> Command | None:
        who = self.acl.authenticate_remoting(request, channel)
        if isinstance(who, Command):
            return who
        return None if who is WHITE else self.acl._permitted(request, channel, who)
