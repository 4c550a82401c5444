"""Editing the ACL file's accounts (UPDATE_AND_CREATE_ACL_CONFIG / DELETE_ACL_CONFIG, issue 33's dashboard).

Pure: a change turns the parsed ACL document (what ``tomllib`` reads) into the next one, which
:func:`~pymq.security.acl.parse_acl` must accept, and :func:`dump_acl` writes it back as TOML. The
broker does the I/O (:mod:`pymq.broker.handlers.acl_accounts`): read, change, check, write to a
temporary file and rename it over the old one, reload. The file is rewritten whole, so comments in
it are not kept.

A request's account (msgpack map, RocketMQ's PlainAccessConfig names)::

    {"accessKey": "app", "secretKey": "app-secret-1", "admin": false,
     "defaultTopicPerm": "DENY", "defaultGroupPerm": "SUB",
     "topicPerms": {"orders": "PUB|SUB"}, "groupPerms": {"billing": "SUB"},
     "whiteRemoteAddress": "192.168.0.*"}

``secretKey`` may be left out (or empty) when the account exists: its secret is kept.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pymq.security.acl import AclFileError, parse_acl, parse_perm, perm_name


def _perms(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AclFileError(f"{where}: must be a map of name -> permission")
    return {str(k).strip(): perm_name(parse_perm(str(v), f"{where}.{k}")) for k, v in value.items() if str(k).strip()}


def account_entry(body: Any, existing: dict[str, Any] | None) -> dict[str, Any]:
    """The ACL file's table for the account a request describes (``existing``: its table now, if any)."""
    if not isinstance(body, dict):
        raise AclFileError("the account must be a map")
    access_key = str(body.get("accessKey") or "").strip()
    if not access_key:
        raise AclFileError("accessKey must not be empty")
    secret = str(body.get("secretKey") or "")
    if not secret:
        if existing is None:
            raise AclFileError(f"a new account ({access_key}) needs a secretKey")
        secret = str(existing.get("secret_key") or "")
    admin = body.get("admin", False)
    if not isinstance(admin, bool):
        raise AclFileError("admin must be true or false")
    entry: dict[str, Any] = {
        "access_key": access_key,
        "secret_key": secret,
        "admin": admin,
        "default_topic_perm": perm_name(parse_perm(str(body.get("defaultTopicPerm") or "DENY"), "defaultTopicPerm")),
        "default_group_perm": perm_name(parse_perm(str(body.get("defaultGroupPerm") or "DENY"), "defaultGroupPerm")),
    }
    topics, groups = _perms(body.get("topicPerms"), "topicPerms"), _perms(body.get("groupPerms"), "groupPerms")
    if topics:
        entry["topic_perms"] = topics
    if groups:
        entry["group_perms"] = groups
    white = body.get("whiteRemoteAddress")
    patterns = white if isinstance(white, list) else str(white or "").split(",")
    patterns = [str(p).strip() for p in patterns if str(p).strip()]
    if patterns:
        entry["white_remote_address"] = patterns[0] if len(patterns) == 1 else patterns
    return entry


def _admins(doc: dict[str, Any]) -> int:
    return sum(1 for a in doc.get("accounts") or [] if isinstance(a, dict) and a.get("admin") is True)


def _checked(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after`` if it is a valid ACL that still has an admin account (when ``before`` had one)."""
    parse_acl(after)
    if _admins(before) and not _admins(after):
        raise AclFileError("the last admin account cannot be removed or demoted")
    return after


def upsert_account(doc: dict[str, Any], body: Any) -> tuple[dict[str, Any], bool]:
    """``doc`` with the request's account created or replaced; True when it is new."""
    accounts = list(doc.get("accounts") or [])
    key = str(body.get("accessKey") or "").strip() if isinstance(body, dict) else ""
    at = next((i for i, a in enumerate(accounts) if isinstance(a, dict) and a.get("access_key") == key), None)
    entry = account_entry(body, accounts[at] if at is not None else None)
    if at is None:
        accounts.append(entry)
    else:
        accounts[at] = entry
    after = {**copy.deepcopy(doc), "accounts": accounts}
    return _checked(doc, after), at is None


def delete_account(doc: dict[str, Any], access_key: str) -> tuple[dict[str, Any], bool]:
    """``doc`` without the account; False (and ``doc`` as it is) when there is none."""
    accounts = [a for a in doc.get("accounts") or [] if not (isinstance(a, dict) and a.get("access_key") == access_key)]
    if len(accounts) == len(doc.get("accounts") or []):
        return doc, False
    return _checked(doc, {**copy.deepcopy(doc), "accounts": accounts}), True


# --- TOML -------------------------------------------------------------------------------------------------


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)} = {_value(x)}" for k, x in v.items()) + " }"
    raise AclFileError(f"cannot write {type(v).__name__} to the ACL file")


def dump_acl(doc: dict[str, Any]) -> str:
    """The ACL document as TOML (``tomllib`` reads back the same document)."""
    lines = ["# pymq ACL file (rewritten by UPDATE_AND_CREATE_ACL_CONFIG / DELETE_ACL_CONFIG)"]
    for key, value in doc.items():
        if key != "accounts":
            lines.append(f"{key} = {_value(value)}")
    for account in doc.get("accounts") or []:
        lines.append("")
        lines.append("[[accounts]]")
        lines.extend(f"{k} = {_value(v)}" for k, v in account.items())
    return "\n".join(lines) + "\n"
