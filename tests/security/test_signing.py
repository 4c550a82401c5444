"""Request signing: canonical form, HMAC, timestamp window, replay guard (pure logic)."""

from __future__ import annotations

import msgpack
import pytest

from pymq.protocol.command import Command
from pymq.security.signing import (
    ACCESS_KEY,
    NONCE,
    SIGNATURE,
    TIMESTAMP,
    Credentials,
    ReplayGuard,
    SignatureError,
    body_digest,
    sign,
    verify,
)

CREDS = Credentials("app", "app-secret")
NOW = 1_700_000_000_000


def signed(code: int = 10, ext: dict | None = None, body: object = b"payload", opaque: int = 7) -> Command:
    cmd = Command(code, opaque, 0, None, dict(ext or {"topic": "orders", "queueId": 3}), body)  # type: ignore[arg-type]
    sign(cmd, CREDS, NOW)
    return cmd


def wire_roundtrip(cmd: Command) -> Command:
    """What the receiver decodes: ext through msgpack (tuples become lists), body joined."""
    ext = msgpack.unpackb(msgpack.packb(cmd.ext, use_bin_type=True), raw=False)
    return Command(cmd.code, cmd.opaque, cmd.flags, None, ext, cmd.body_bytes())


def test_signed_request_verifies_after_the_wire() -> None:
    cmd = wire_roundtrip(signed(ext={"topic": "t", "n": 1, "f": 2.0, "b": True, "l": (1, 2), "none": None}))
    assert set(cmd.ext) >= {ACCESS_KEY, SIGNATURE, TIMESTAMP, NONCE}
    assert verify(cmd, "app-secret", NOW + 1000, 60_000) == cmd.ext[SIGNATURE]


def test_sequence_body_digest_equals_joined_body() -> None:
    assert body_digest([b"ab", memoryview(b"cd")]) == body_digest(b"abcd")
    cmd = signed(body=[b"ab", b"cd"])
    assert verify(wire_roundtrip(cmd), "app-secret", NOW, 60_000)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: c.ext.__setitem__("topic", "other"),
        lambda c: c.ext.__setitem__("extra", "1"),
        lambda c: setattr(c, "body", b"payload!"),
        lambda c: setattr(c, "code", 11),
        lambda c: setattr(c, "opaque", 8),
        lambda c: c.ext.__setitem__(TIMESTAMP, NOW + 1),
        lambda c: c.ext.__setitem__(NONCE, "x"),
    ],
)
def test_any_change_breaks_the_signature(tamper: object) -> None:
    cmd = signed()
    tamper(cmd)  # type: ignore[operator]
    with pytest.raises(SignatureError, match="signature mismatch"):
        verify(cmd, "app-secret", NOW, 60_000)


def test_wrong_secret_unsigned_and_window() -> None:
    cmd = signed()
    with pytest.raises(SignatureError, match="mismatch"):
        verify(cmd, "other-secret", NOW, 60_000)
    with pytest.raises(SignatureError, match="outside the allowed window"):
        verify(cmd, "app-secret", NOW + 60_001, 60_000)
    with pytest.raises(SignatureError, match="outside the allowed window"):
        verify(cmd, "app-secret", NOW - 60_001, 60_000)
    with pytest.raises(SignatureError, match="not signed"):
        verify(Command(10, 1, 0, None, {"topic": "t"}), "app-secret", NOW, 60_000)
    bad_ts = signed()
    bad_ts.ext[TIMESTAMP] = "soon"
    with pytest.raises(SignatureError, match="timestamp missing or malformed"):
        verify(bad_ts, "app-secret", NOW, 60_000)


def test_identical_requests_sign_differently_by_opaque() -> None:
    assert signed(opaque=1).ext[SIGNATURE] != signed(opaque=2).ext[SIGNATURE]


def test_credentials_never_print_the_secret() -> None:
    assert "app-secret" not in repr(CREDS)
    with pytest.raises(ValueError):
        Credentials("", "x")


def test_replay_guard_remembers_for_a_window_and_is_bounded() -> None:
    guard = ReplayGuard(window_seconds=10, max_entries=100)
    assert not guard.seen("a", 0.0)
    assert guard.seen("a", 5.0)
    assert guard.seen("a", 12.0)  # previous generation still remembered
    assert not guard.seen("b", 12.0)
    assert not guard.seen("a", 40.0)  # two windows later: the timestamp check refuses it anyway
    for i in range(1000):
        guard.seen(f"x{i}", 41.0)
    assert len(guard) <= 100


def test_a_forked_child_gets_its_own_nonce() -> None:
    import os

    from pymq.security import signing

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its nonce and leave at once
        os.write(w, signing.PROCESS_NONCE.encode())
        os._exit(0)
    os.close(w)
    child_nonce = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert child_nonce and child_nonce != signing.PROCESS_NONCE


@pytest.mark.parametrize(
    ("signed_ext", "forged_ext"),
    [
        ({"a": "1\nb=2"}, {"a": "1", "b": "2"}),  # a newline inside a value
        ({"a=b": "c"}, {"a": "b=c"}),  # an '=' inside a name
        ({"keys": ["x,y"]}, {"keys": ["x", "y"]}),  # a ',' inside a list item
    ],
)
def test_field_boundaries_cannot_be_forged_inside_values(signed_ext: dict, forged_ext: dict) -> None:
    cmd = signed(ext=signed_ext)
    fields = {k: cmd.ext[k] for k in (ACCESS_KEY, TIMESTAMP, NONCE, SIGNATURE)}
    forged = Command(cmd.code, cmd.opaque, 0, None, {**forged_ext, **fields}, cmd.body)  # type: ignore[arg-type]
    with pytest.raises(SignatureError, match="mismatch"):
        verify(forged, CREDS.secret_key, NOW, 60_000)
