"""RocketMQ 4.x request signatures (AclClientRPCHook), as a 4.x client computes them (pure logic).

The client puts ``AccessKey`` (and ``SecurityToken``, and the C++ client ``OnsChannel``) into
the request's extFields beside the custom header fields, then signs::

    Signature = base64(HMAC-SHA1(secretKey, values of all extFields but Signature, sorted by name,
                                 concatenated, then the body))

The verifier (apache/rocketmq PlainAccessValidator) rebuilds the same content from the
extFields it received. The scheme has no timestamp or nonce: a captured request can be
replayed, which is why pymq's own clients sign with :mod:`pymq.security.signing` instead;
TLS on the listener is what protects 4.x clients' requests from capture.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def content(ext: Mapping[str, str], body: bytes) -> bytes:
    """What is signed: the values of ``ext`` but the signature, in key order, then the body."""
    text = "".join(ext[k] for k in sorted(ext) if k != SIGNATURE)
    return text.encode() + body


def sign(ext: Mapping[str, str], body: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.new(secret_key.encode(), content(ext, body), hashlib.sha1).digest()).decode()


def verify(ext: Mapping[str, str], body: bytes, secret_key: str) -> bool:
    """Whether ``ext``'s Signature is the one ``secret_key`` makes (constant-time compare)."""
    given = ext.get(SIGNATURE)
    if not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(given.encode(), sign(ext, body, secret_key).encode())
