"""The ACL file's account edits (pure): create, update keeping the secret, delete, refusals, TOML round trip."""

from __future__ import annotations

import tomllib

import pytest

from pymq.security.acl import AclFileError, parse_acl
from pymq.security.acl_edit import account_entry, delete_account, dump_acl, upsert_account
from tests.acl_accounts import account, acl_toml

DOC = tomllib.loads(
    'global_white_remote_addresses = ["10.0.0.0/8"]\n'
    + acl_toml(account("app", topic_perms=["orders=PUB|SUB"], white_remote_address="192.168.*"))
)


def test_create_then_update_keeps_the_secret_and_round_trips() -> None:
    body = {
        "accessKey": "new",
        "secretKey": 'se"cret\\1',
        "defaultGroupPerm": "sub",
        "topicPerms": {"a b": "PUB", "x.y": "SUB|PUB"},
        "whiteRemoteAddress": "10.1.*, 10.2.*",
    }
    doc, created = upsert_account(DOC, body)
    assert created and len(doc["accounts"]) == 3 and len(DOC["accounts"]) == 2  # the input is not changed
    again = tomllib.loads(dump_acl(doc))
    assert again == doc
    acl = parse_acl(again)
    new = acl.accounts["new"]
    assert new.secret_key == 'se"cret\\1' and new.is_white("10.2.3.4") and not new.is_white("10.3.0.1")
    assert {a["accessKey"]: a for a in acl.describe()}["new"]["topicPerms"] == {"a b": "PUB", "x.y": "PUB|SUB"}
    assert acl.is_globally_white("10.9.9.9") and acl.accounts["app"].is_white("192.168.1.1")

    doc, created = upsert_account(again, {"accessKey": "new", "admin": True})
    assert not created
    entry = next(a for a in doc["accounts"] if a["access_key"] == "new")
    assert entry == {
        "access_key": "new",
        "secret_key": 'se"cret\\1',
        "admin": True,
        "default_topic_perm": "DENY",
        "default_group_perm": "DENY",
    }


def test_delete_and_refusals() -> None:
    doc, deleted = delete_account(DOC, "app")
    assert deleted and [a["access_key"] for a in doc["accounts"]] == ["broker"]
    same, deleted = delete_account(DOC, "nobody")
    assert not deleted and same is DOC
    with pytest.raises(AclFileError, match="last admin account"):
        delete_account(doc, "broker")
    with pytest.raises(AclFileError, match="needs a secretKey"):
        upsert_account(DOC, {"accessKey": "fresh"})
    with pytest.raises(AclFileError, match="at least 6 characters"):
        upsert_account(DOC, {"accessKey": "fresh", "secretKey": "short"})
    with pytest.raises(AclFileError, match="permission must be"):
        account_entry({"accessKey": "a", "secretKey": "secret-1", "groupPerms": {"g": "WRITE"}}, None)
    with pytest.raises(AclFileError, match="bad address"):
        upsert_account(DOC, {"accessKey": "w", "secretKey": "secret-1", "whiteRemoteAddress": "300.1.x"})
    with pytest.raises(AclFileError, match="accessKey must not be empty"):
        account_entry({"secretKey": "secret-1"}, None)
