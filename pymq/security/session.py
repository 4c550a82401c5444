"""Connection sessions under ACL + TLS: authenticate once per TLS connection, then trust the channel.

RocketMQ's model signs every request (:mod:`pymq.security.signing`): an HMAC over the
request's fields and a SHA-256 of its body, on both ends, per request. Over TLS the channel
already guarantees that the bytes come, unaltered and unreplayed, from the peer that did the
handshake, so pymq's own client may instead prove its account once per connection (as Kafka's
SASL over TLS does) and then send its requests unsigned:

1. ``SESSION_CHALLENGE`` (unsigned): the server answers a fresh random ``Challenge`` and
   remembers it on this connection (one at a time; a new one replaces the old).
2. ``SESSION_OPEN``, signed per request as usual (timestamp window, replay guard), carrying
   that ``Challenge``: the server checks the signature, then that the challenge is the one it
   issued on *this* connection (and forgets it: one use), and binds the account to the
   connection.

From then on a request on that connection without an ``AccessKey`` is the session account's;
its topic and group permissions are still checked per request. A signed request on the same
connection is verified as before. The rules that keep this as safe as signing every request:

* a session is accepted only on a TLS connection (a plaintext connection could be hijacked
  after the handshake: its requests must each be signed);
* it is bound to the connection it was opened on: the signed ``SESSION_OPEN`` covers a
  challenge only that connection was given, so replaying it on another connection is refused;
* it ends with the connection, and when the account's secret key changes or the account is
  removed (the next request then closes the connection: the client reconnects and proves the
  new key, or fails).

This module is the pure part (field names, the client's two requests, the server's state
per connection); :class:`~pymq.security.interceptor.AclInterceptor` enforces it.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from typing import Any, Protocol

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command

#: the header field of both session requests' challenge (hex)
CHALLENGE = "Challenge"
#: channel attrs: the challenge issued on the connection, and the session bound to it
CHALLENGE_ATTR = "acl_session_challenge"
SESSION_ATTR = "acl_session"
#: random bytes in a challenge
CHALLENGE_BYTES = 16

SESSION_CHALLENGE = int(RequestCode.SESSION_CHALLENGE)
SESSION_OPEN = int(RequestCode.SESSION_OPEN)


@dataclass(frozen=True, slots=True)
class Session:
    """The account bound to one connection, and the secret key it proved (a changed key ends it)."""

    access_key: str
    secret_key: str


def new_challenge() -> str:
    return os.urandom(CHALLENGE_BYTES).hex()


def challenge_matches(issued: Any, given: Any) -> bool:
    """Whether ``given`` is the challenge this connection was ``issued`` (constant-time)."""
    if not isinstance(issued, str) or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(issued.encode(), given.encode(errors="replace"))


def is_tls(channel: Any) -> bool:
    """Whether ``channel`` is a TLS connection (a connection's ``tls`` flag; anything else: no)."""
    return getattr(channel, "tls", False) is True


# --- the client's side --------------------------------------------------------------------------------


class SessionConnection(Protocol):
    """What the client's opener needs of a connection (its ``signer`` signs what it sends meanwhile)."""

    tls: bool

    async def request(self, cmd: Command, timeout: float) -> Command: ...


async def open_session(conn: SessionConnection, timeout: float) -> bool:
    """Open a session on a new connection whose requests are being signed: True when it now carries
    one (its later requests may go unsigned), False when it must keep signing each request (not TLS,
    or a server without sessions: an older one, or one without ACL). A refused ``SESSION_OPEN``
    (bad credentials) is False too: the signed requests then get the server's real answer.

    What :class:`~pymq.transport.client.RpcClient` runs on each connection when given credentials.
    """
    if not conn.tls:
        return False  # never on plaintext: the server would refuse it too
    answer = await conn.request(Command.request(SESSION_CHALLENGE), timeout)
    challenge = answer.ext.get(CHALLENGE)
    if answer.code != ResponseCode.SUCCESS or not isinstance(challenge, str):
        return False  # REQUEST_CODE_NOT_SUPPORTED: a server that has no sessions
    opened = await conn.request(Command.request(SESSION_OPEN, {CHALLENGE: challenge}), timeout)
    return opened.code == ResponseCode.SUCCESS
