"""The ``authorization`` header of RocketMQ 5 clients, checked against pymq's ACL accounts.

A 5.x client signs every call: ``authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secret key, x-mq-date-time)>`` (the
Java and Python clients' ``Signature`` classes). With ACL on, the front end finds the account
in the ACL file (:mod:`pymq.security.acl`, the brokers' file format), checks the signature
(UNAUTHORIZED: never says whether the key or the secret was wrong), then the call's needs
against the account's topic and group permissions (FORBIDDEN, naming the permission and the
resource): sending and ending transactions need PUB on the topic; receiving, acking, changing
invisibility, forwarding to the DLQ and assignments need SUB on the topic and the group; a
route needs PUB or SUB; a consumer's heartbeat SUB on its group; Telemetry settings what the
client declares (a producer's topics PUB, a consumer's group and topics SUB). White remote
addresses (global, or an account's) need no signature, as on the brokers.

The signature covers only ``x-mq-date-time`` (``yyyyMMddTHHmmssZ``), so it is the same for every
call a client makes within a second: a replay guard keyed by signature would refuse legitimate
calls, and there is none. What bounds a captured signature is the date window: a date further
than ``date_window_seconds`` (default 15 minutes) from the front end's clock is refused
(UNAUTHORIZED, saying by how much). The Python client 5.1.2 writes its *local* time with a
``Z``: on a machine whose clock is not in UTC its calls are off by the UTC offset; widen the
window for such clients (or set their TZ to UTC). TLS on the port is what keeps signatures
from being captured.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.clients import metadata
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.security.acl import ANY, PUB, SUB, AclConfig, AclFileError, allows, load_acl

SCHEME = "MQv2-HMAC-SHA1"
DATE_TIME = "x-mq-date-time"
#: the refusal that must not tell an unknown key from a wrong secret
BAD_CREDENTIALS = "bad credentials"

_TOPIC, _GROUP = "topic", "group"
Need = tuple[str, str, int]


def sign(secret_key: str, date_time: str) -> str:
    """The client's signature: hex HMAC-SHA1 of the ``x-mq-date-time`` value under the secret key."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse_authorization(value: str) -> tuple[str, list[str], str]:
    """(access key, signed headers, signature) of an ``authorization`` value; ValueError if it is not one."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        raise ValueError(f"authorization scheme must be {SCHEME}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if sep:
            fields[key.strip()] = val.strip()
    try:
        return fields["Credential"], fields["SignedHeaders"].split(";"), fields["Signature"]
    except KeyError as exc:
        raise ValueError(f"authorization has no {exc.args[0]}") from None


#: how far a signed ``x-mq-date-time`` may be from the front end's clock (0: not checked)
DEFAULT_DATE_WINDOW_SECONDS = 900.0


def parse_date_time(value: str) -> float:
    """Seconds since the epoch of an ``x-mq-date-time`` (``20261128T120000Z``); ValueError if it is not one."""
    return datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()


def peer_ip(peer: str) -> str:
    """The IP of grpc's peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    _, _, addr = peer.partition(":")
    host = addr.rpartition(":")[0] or addr
    return host.strip("[]")


def needs(method: str, request: Any) -> list[Need]:
    """What a call needs of its account (see the module's docstring)."""
    sub = SUB
    if method == "QueryRoute":
        return [(_TOPIC, request.topic.name, ANY)]
    if method == "SendMessage":
        return [(_TOPIC, m.topic.name, PUB) for m in request.messages]
    if method == "EndTransaction":
        return [(_TOPIC, request.topic.name, PUB)]
    if method == "ReceiveMessage":
        return [(_TOPIC, request.message_queue.topic.name, sub), (_GROUP, request.group.name, sub)]
    if method in ("QueryAssignment", "AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"):
        return [(_TOPIC, request.topic.name, sub), (_GROUP, request.group.name, sub)]
    if method == "Heartbeat" and request.client_type != pb.PRODUCER and request.group.name:
        return [(_GROUP, request.group.name, sub)]
    return []


def settings_needs(settings: pb.Settings) -> list[Need]:
    """What a client's Telemetry settings declare it will do."""
    if settings.client_type == pb.PRODUCER:
        return [(_TOPIC, t.name, PUB) for t in settings.publishing.topics]
    out: list[Need] = []
    if settings.subscription.group.name:
        out.append((_GROUP, settings.subscription.group.name, SUB))
    out += [(_TOPIC, e.topic.name, SUB) for e in settings.subscription.subscriptions]
    return out


class GrpcAcl:
    """Authenticates and authorizes 5.x calls with an ACL file (re-read when it changes)."""

    def __init__(
        self,
        path: str | Path,
        *,
        reload_interval_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        date_window_seconds: float = DEFAULT_DATE_WINDOW_SECONDS,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.date_window_seconds = date_window_seconds
        self._wall_clock = wall_clock
        self.acl: AclConfig = load_acl(self.path)
        self._mtime = self._stat()
        self.reload_interval_s = reload_interval_s
        self._monotonic = monotonic
        self._checked = monotonic()
        #: calls refused since start, by v2 code (UNAUTHORIZED, FORBIDDEN)
        self.refusals: Counter[int] = Counter()

    def _stat(self) -> int | None:
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return None

    def _maybe_reload(self) -> None:
        now = self._monotonic()
        if now - self._checked < self.reload_interval_s:
            return
        self._checked = now
        mtime = self._stat()
        if mtime is None or mtime == self._mtime:
            return
        try:
            self.acl = load_acl(self.path)
        except AclFileError:
            return  # keep the rules in force (the brokers do the same)
        self._mtime = mtime

    def check(self, method: str, request: Any, context: Any) -> pb.Status | None:
        """None if the call may go on, else the status to answer it with."""
        return self.check_needs(needs(method, request), context)

    def check_needs(self, wanted: list[Need], context: Any) -> pb.Status | None:
        self._maybe_reload()
        acl = self.acl
        ip = peer_ip(str(context.peer())) if context is not None else ""
        if acl.global_white and acl.is_globally_white(ip):
            return None
        headers = metadata(context)
        raw = headers.get("authorization")
        if not raw:
            return self._refuse(pb.UNAUTHORIZED, "request not signed (no authorization header)")
        try:
            access_key, signed, signature = parse_authorization(raw)
        except ValueError as exc:
            return self._refuse(pb.UNAUTHORIZED, f"malformed authorization header: {exc}")
        account = acl.accounts.get(access_key)
        if account is None:
            return self._refuse(pb.UNAUTHORIZED, BAD_CREDENTIALS)
        if not (account.white_remote and account.is_white(ip)):
            date_time = headers.get(DATE_TIME, "")
            if DATE_TIME not in [h.strip().lower() for h in signed] or not date_time:
                return self._refuse(pb.UNAUTHORIZED, f"authorization must sign {DATE_TIME}")
            if not hmac.compare_digest(sign(account.secret_key, date_time), signature.lower()):
                return self._refuse(pb.UNAUTHORIZED, BAD_CREDENTIALS)
            if self.date_window_seconds:
                try:
                    skew = parse_date_time(date_time) - self._wall_clock()
                except ValueError:
                    return self._refuse(pb.UNAUTHORIZED, f"{DATE_TIME} {date_time[:32]!r} is not yyyyMMddTHHmmssZ")
                if abs(skew) > self.date_window_seconds:
                    return self._refuse(
                        pb.UNAUTHORIZED,
                        f"{DATE_TIME} {date_time} is {skew:+.0f} s from the front end's clock (window "
                        f"{self.date_window_seconds:.0f} s; a client writing local time as UTC is off by its offset)",
                    )
        for kind, name, perm in wanted:
            if not name:
                continue  # the call's own validation answers a missing name
            owned = account.topic_perm(name) if kind == _TOPIC else account.group_perm(name)
            if not allows(perm, owned):
                what = {PUB: "PUB", SUB: "SUB", ANY: "PUB or SUB"}.get(perm, "PUB|SUB")
                return self._refuse(pb.FORBIDDEN, f"no {what} permission on {kind} {name}")
        return None

    def _refuse(self, code: int, message: str) -> pb.Status:
        self.refusals[code] += 1
        return mapping.status(code, message)


__all__ = [
    "DEFAULT_DATE_WINDOW_SECONDS",
    "GrpcAcl",
    "needs",
    "parse_authorization",
    "parse_date_time",
    "peer_ip",
    "settings_needs",
    "sign",
]
