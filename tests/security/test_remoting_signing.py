"""RocketMQ 4.x AclClientRPCHook signatures (pure): what is signed, and what a change breaks."""

from __future__ import annotations

import base64
import hashlib
import hmac

from pymq.security.remoting_signing import content, sign, verify


def test_content_is_the_sorted_values_but_the_signature_then_the_body() -> None:
    ext = {"topic": "T", "AccessKey": "ak", "Signature": "zzz", "OnsChannel": "ALIYUN", "b": "1"}
    # keys in order: AccessKey, OnsChannel, b, topic (Signature left out)
    assert content(ext, b"BODY") == b"akALIYUN1TBODY"


def test_sign_is_base64_hmac_sha1_of_the_content() -> None:
    ext = {"AccessKey": "ak", "topic": "T"}
    want = base64.b64encode(hmac.new(b"sk", b"akTbody", hashlib.sha1).digest()).decode()
    assert sign(ext, b"body", "sk") == want


def test_verify_accepts_the_signed_request_and_refuses_any_change() -> None:
    ext = {"AccessKey": "ak", "topic": "T", "queueId": "3"}
    ext["Signature"] = sign(ext, b"payload", "sk")
    assert verify(ext, b"payload", "sk")
    assert not verify(ext, b"payload!", "sk")
    assert not verify(ext, b"payload", "other")
    assert not verify({**ext, "queueId": "4"}, b"payload", "sk")
    assert not verify({k: v for k, v in ext.items() if k != "Signature"}, b"payload", "sk")
    assert not verify({**ext, "Signature": ""}, b"payload", "sk")
