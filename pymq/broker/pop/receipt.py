"""Receipt handles: opaque to clients, signed by the broker, verified on every ack.

A handle names the checkpoint a message was popped under (its commitlog offset, the
checkpoint's identity), the message's index in it, its queue offset and its deadline
(pop time + invisible time), for one group and topic. It is the fields joined by a unit
separator, base64url-encoded, plus an HMAC-SHA256 (16 bytes) under a secret the broker
keeps in its store directory (``config/pop.secret``, made on first start): a forged or
altered handle, or one from another broker's store, fails verification.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path

_SEP = "\x1f"
_VERSION = "1"
_MAC_BYTES = 16


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    group: str
    #: the topic the message was popped from (the topic or the group's pop retry topic)
    topic: str
    queue_id: int
    queue_offset: int
    #: commitlog offset of the checkpoint record (its identity)
    ck_offset: int
    #: the message's bit in the checkpoint
    index: int
    pop_time: int
    invisible_ms: int
    revive_qid: int

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms


class HandleError(Exception):
    """A handle that does not verify (malformed or not signed by this broker)."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class HandleSigner:
    """Signs and verifies handles with one broker secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("receipt handle secret too short")
        self._secret = secret

    @classmethod
    def from_store(cls, config_dir: Path) -> HandleSigner:
        """The secret in ``config_dir/pop.secret`` (created, mode 0600, when missing)."""
        path = config_dir / "pop.secret"
        try:
            secret = path.read_bytes()
        except FileNotFoundError:
            config_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, os.urandom(32))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            secret = path.read_bytes()
        return cls(secret)

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, h: ReceiptHandle) -> str:
        fields = (
            _VERSION,
            h.group,
            h.topic,
            str(h.queue_id),
            str(h.queue_offset),
            str(h.ck_offset),
            str(h.index),
            str(h.pop_time),
            str(h.invisible_ms),
            str(h.revive_qid),
        )
        payload = _SEP.join(fields).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def decode(self, text: str) -> ReceiptHandle:
        """The handle's fields; :class:`HandleError` if it is malformed or its signature is wrong."""
        body, dot, mac = text.partition(".")
        if not dot or not body or not mac:
            raise HandleError("malformed receipt handle")
        try:
            payload = _unb64(body)
            given = _unb64(mac)
        except (binascii.Error, ValueError) as exc:
            raise HandleError("malformed receipt handle") from exc
        if not hmac.compare_digest(given, self._mac(payload)):
            raise HandleError("receipt handle signature does not verify")
        try:
            parts = payload.decode().split(_SEP)
            if len(parts) != 10 or parts[0] != _VERSION:
                raise ValueError("version")
            nums = [int(p) for p in parts[3:]]
        except (UnicodeDecodeError, ValueError) as exc:  # signed but unreadable: another version
            raise HandleError("unreadable receipt handle") from exc
        return ReceiptHandle(parts[1], parts[2], *nums)
