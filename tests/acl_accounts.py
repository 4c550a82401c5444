"""ACL files for tests: accounts written as TOML, with the broker's own admin account first.

Every secured cluster in the tests (in process, as daemons, under Spark) gives its brokers the
``broker`` account (:data:`BROKER_CREDENTIALS`) and its clients accounts of their own:

    ACL = acl_toml(account("app", topic_perms={"orders": "PUB|SUB"}, default_group_perm="SUB"))
    write_acl(tmp_path / "acl.toml", ACL)
"""

from __future__ import annotations

from pathlib import Path

#: the brokers' credentials in every test ACL file (an admin account)
BROKER_CREDENTIALS = {"access_key": "broker", "secret_key": "broker-secret"}


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return f'"{v}"'


def account(access_key: str, secret_key: str | None = None, **fields: object) -> str:
    """One ``[[accounts]]`` table (secret key ``<access_key>-secret`` unless given), fields in order."""
    lines = ["[[accounts]]", f'access_key = "{access_key}"', f'secret_key = "{secret_key or access_key + "-secret"}"']
    lines += [f"{k} = {_value(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def admin_account(access_key: str, secret_key: str | None = None) -> str:
    """An admin account with publish and subscribe on every topic and group."""
    return account(access_key, secret_key, admin=True, default_topic_perm="PUB|SUB", default_group_perm="PUB|SUB")


def acl_toml(*accounts: str) -> str:
    """An ACL file's text: the broker's admin account, then ``accounts``."""
    broker = admin_account(BROKER_CREDENTIALS["access_key"], BROKER_CREDENTIALS["secret_key"])
    return "\n".join((broker, *accounts))


def write_acl(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
