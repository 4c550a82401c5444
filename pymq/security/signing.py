"""Request signing: HMAC-SHA256 over a canonical form of a request (pure logic, no sockets).

A signed request carries four extra header fields: ``AccessKey``, ``Timestamp`` (ms since
the epoch), ``Nonce`` (a per-process random token) and ``Signature``. The signature is
``base64(HMAC-SHA256(secret_key, canonical))`` where ``canonical`` is, one item per line:

    pymq-sign-v2
    <request code>
    <opaque>
    <sorted header fields as "name"="value" (JSON-quoted strings), Signature excluded, one per line>
    <hex SHA-256 of the body>

A list or map value is written as ``[item,…]`` / ``{key:item,…}`` with each scalar item
JSON-quoted and nested lists and maps written as they are (not quoted again: the text stays
linear in the value's size), at most :data:`MAX_VALUE_DEPTH` deep.

The timestamp and nonce are header fields, so they are covered by the sorted fields; the
opaque (unique per request within one process) and the per-process nonce make two
otherwise identical requests sign differently, which is what lets the verifier refuse a
replayed signature without refusing a legitimate repeat. The body is hashed once, over
the already-encoded bytes (a sequence body is hashed part by part, never joined).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring as _quote
from typing import Any

from pymq.protocol.command import Command

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
TIMESTAMP = "Timestamp"
NONCE = "Nonce"
#: the header fields signing adds (a verifier reads them; handlers ignore them)
SIGNING_FIELDS = (ACCESS_KEY, SIGNATURE, TIMESTAMP, NONCE)

_VERSION = b"pymq-sign-v2"
#: one random token per process: with the opaque it makes every request's canonical form unique
PROCESS_NONCE = os.urandom(8).hex()


def _new_nonce_after_fork() -> None:
    # A forked child (Spark's Python workers) inherits the parent's opaque counter: a fresh
    # nonce keeps its requests from signing like its siblings' (and being refused as replays).
    global PROCESS_NONCE
    PROCESS_NONCE = os.urandom(8).hex()


os.register_at_fork(after_in_child=_new_nonce_after_fork)


@dataclass(frozen=True, slots=True)
class Credentials:
    """An account's access key and secret key."""

    access_key: str
    secret_key: str

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("access key and secret key must both be non-empty")

    def __repr__(self) -> str:  # never print the secret
        return f"Credentials(access_key={self.access_key!r}, secret_key='***')"


def body_digest(body: Any) -> bytes:
    """SHA-256 hex digest of a body: bytes-like, or a sequence of bytes-like parts (not joined)."""
    h = hashlib.sha256()
    if isinstance(body, bytes | bytearray | memoryview):
        h.update(body)
    else:
        for part in body:
            h.update(part)
    return h.hexdigest().encode()


#: how deep lists and maps may nest in a signed header value (deeper: SignatureError, never a RecursionError)
MAX_VALUE_DEPTH = 32


def _text(value: Any, depth: int = 0) -> str:
    """One header value as the canonical form writes it (both ends see the same decoded types)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):  # msgpack turns a tuple into a list: write both alike
        return "[" + ",".join(_item(v, depth + 1) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ",".join(f"{_item(k, depth + 1)}:{_item(value[k], depth + 1)}" for k in sorted(value, key=str)) + "}"
        )
    return repr(value)


def _item(value: Any, depth: int) -> str:
    """An item of a list or map: a scalar quoted, a list or map as it is.

    Quoting a nested list's text again would escape its quotes at every level, doubling
    the backslashes each time: a value nested 40 deep would write terabytes. Unquoted
    brackets stay unambiguous, since every scalar inside is quoted.
    """
    if depth > MAX_VALUE_DEPTH:
        raise SignatureError(f"header value nested more than {MAX_VALUE_DEPTH} deep")
    if isinstance(value, list | tuple | dict):
        return _text(value, depth)
    return _quote(_text(value, depth))


def canonical(code: int, opaque: int, ext: dict[str, Any], digest: bytes) -> bytes:
    """The bytes the signature covers (see the module docstring); SignatureError for a value nested too deep."""
    lines = [_VERSION, str(code).encode(), str(opaque).encode()]
    for name in sorted(ext, key=str):  # keys are strings from our clients; anything else must not crash
        if name != SIGNATURE:
            # Quoted (JSON string escapes): a newline, '=' or ',' inside a name or value can never
            # make two different headers write the same lines.
            lines.append(f"{_quote(str(name))}={_quote(_text(ext[name]))}".encode(errors="replace"))
    lines.append(digest)
    return b"\n".join(lines)


def signature(secret_key: str, data: bytes) -> str:
    return base64.b64encode(hmac.new(secret_key.encode(), data, hashlib.sha256).digest()).decode()


def sign(cmd: Command, creds: Credentials, now_ms: int) -> None:
    """Add the signing fields to ``cmd.ext`` (its code, opaque, fields and body are final)."""
    ext = cmd.ext
    ext[ACCESS_KEY] = creds.access_key
    ext[TIMESTAMP] = now_ms
    ext[NONCE] = PROCESS_NONCE
    ext[SIGNATURE] = signature(creds.secret_key, canonical(cmd.code, cmd.opaque, ext, body_digest(cmd.body)))


def signer(creds: Credentials, clock_ms: Callable[[], int] | None = None) -> Callable[[Command], None]:
    """A callable that signs each outgoing request with ``creds`` (what transports take)."""
    now = clock_ms or (lambda: time.time_ns() // 1_000_000)

    def _sign(cmd: Command) -> None:
        sign(cmd, creds, now())

    return _sign


class SignatureError(Exception):
    """Why a request's signature was refused (the message is safe to send back)."""


def verify(cmd: Command, secret_key: str, now_ms: int, window_ms: int) -> str:
    """Check ``cmd``'s timestamp window and signature; return the signature, or raise SignatureError."""
    ext = cmd.ext
    sig = ext.get(SIGNATURE)
    ts = ext.get(TIMESTAMP)
    if not isinstance(sig, str) or not sig:
        raise SignatureError("request not signed")
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise SignatureError("request timestamp missing or malformed")
    if abs(now_ms - ts) > window_ms:
        raise SignatureError("request timestamp outside the allowed window")
    expected = signature(secret_key, canonical(cmd.code, cmd.opaque, ext, body_digest(cmd.body)))
    if not hmac.compare_digest(expected.encode(), sig.encode(errors="replace")):
        raise SignatureError("signature mismatch")
    return sig


class ReplayGuard:
    """Remembers signatures seen within the replay window; a repeat is a replay.

    Two generations of ``window`` seconds each: a signature is remembered for at least one
    window (a request older than that fails the timestamp check anyway). ``max_entries``
    bounds memory: a generation that fills up rotates early, which shortens how long
    signatures are remembered under extreme request rates (the timestamp window still holds).
    """

    def __init__(self, window_seconds: float, max_entries: int = 1_000_000) -> None:
        self.window = window_seconds
        self.max_entries = max(2, max_entries)
        self._current: set[str] = set()
        self._previous: set[str] = set()
        self._rotated_at = 0.0

    def seen(self, sig: str, now: float) -> bool:
        """True if ``sig`` was seen before (a replay); otherwise remember it."""
        if now - self._rotated_at >= self.window or len(self._current) >= self.max_entries // 2:
            self._previous, self._current = self._current, set()
            self._rotated_at = now
        if sig in self._current or sig in self._previous:
            return True
        self._current.add(sig)
        return False

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
