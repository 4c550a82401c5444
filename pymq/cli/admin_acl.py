"""``pymq-admin`` commands for the ACL accounts: list them (never their secrets), create or update one,
delete one (every broker's ACL file; loaded onto the group by :mod:`pymq.cli.admin`)."""

from __future__ import annotations

import sys
from typing import Any

import click

from pymq.cli.admin_group import AdminContext, admin_command, main
from pymq.cli.output import emit, table
from pymq.client.admin import AdminClient


def perm_pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    """``--topic-perm orders=PUB|SUB`` options as a map (the broker checks the permissions)."""
    out = {}
    for item in items:
        name, sep, perm = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not NAME=PERM", param_hint=option)
        out[name.strip()] = perm.strip()
    return out


def finish(result: dict[str, dict[str, Any]], ctx: AdminContext, lines: list[str]) -> None:
    """Print each broker's answer; exit 1 when some broker refused (the others did change)."""
    emit(result, ctx.as_json, "\n".join(lines))
    if any("error" in r for r in result.values()):
        sys.exit(1)


@main.command("acl-accounts")
@admin_command
async def acl_accounts(admin: AdminClient, ctx: AdminContext) -> None:
    """The ACL accounts and their rights as the first master enforces them (secret keys are never sent).

    \b
    Example:
      pymq-admin acl-accounts
    """
    info = await admin.acl_accounts()
    if not info.get("enabled"):
        emit(info, ctx.as_json, f"ACL is off on {info.get('brokerName')}: every request is allowed")
        return
    rows = [
        {
            **a,
            "topicPerms": " ".join(f"{k}={v}" for k, v in a["topicPerms"].items()),
            "groupPerms": " ".join(f"{k}={v}" for k, v in a["groupPerms"].items()),
            "white": ",".join(a.get("whiteRemoteAddress") or []),
        }
        for a in info["accounts"]
    ]
    columns = [
        ("accessKey", "ACCESS KEY"),
        ("admin", "ADMIN"),
        ("defaultTopicPerm", "DEFAULT TOPIC"),
        ("defaultGroupPerm", "DEFAULT GROUP"),
        ("topicPerms", "TOPICS"),
        ("groupPerms", "GROUPS"),
        ("white", "WHITE ADDRESSES"),
    ]
    emit(info, ctx.as_json, table(rows, columns))


@main.command("acl-update")
@click.option("--account", "account_key", required=True, help="The account's access key.")
@click.option(
    "--account-secret",
    default=None,
    help="Its secret key (6 characters or more); needed for a new account, kept when left out.",
)
@click.option("--admin/--no-admin", "is_admin", default=False, help="May make admin requests.")
@click.option("--default-topic-perm", default="DENY", help="DENY, PUB, SUB or PUB|SUB.")
@click.option("--default-group-perm", default="DENY", help="DENY, PUB, SUB or PUB|SUB.")
@click.option("--topic-perm", multiple=True, help="TOPIC=PERM (repeat).")
@click.option("--group-perm", multiple=True, help="GROUP=PERM (repeat).")
@click.option("--white-remote-address", default="", help="Addresses that need no signature (a pattern, or a list).")
@admin_command
async def acl_update(
    admin: AdminClient,
    ctx: AdminContext,
    account_key: str,
    account_secret: str | None,
    is_admin: bool,
    default_topic_perm: str,
    default_group_perm: str,
    topic_perm: tuple[str, ...],
    group_perm: tuple[str, ...],
    white_remote_address: str,
) -> None:
    """Create an ACL account, or replace one's rights, in every broker's ACL file (reloaded at once).

    \b
    Example:
      pymq-admin acl-update --account app --account-secret app-secret-1 \\
          --default-group-perm SUB --topic-perm 'orders=PUB|SUB'
    """
    account: dict[str, Any] = {
        "accessKey": account_key,
        "admin": is_admin,
        "defaultTopicPerm": default_topic_perm,
        "defaultGroupPerm": default_group_perm,
        "topicPerms": perm_pairs(topic_perm, "--topic-perm"),
        "groupPerms": perm_pairs(group_perm, "--group-perm"),
        "whiteRemoteAddress": white_remote_address,
    }
    if account_secret:
        account["secretKey"] = account_secret
    result = await admin.acl_update(account)
    lines = [
        f"{where}: error: {r['error']}" if "error" in r else f"{where}: {'created' if r.get('created') else 'updated'}"
        for where, r in result.items()
    ]
    finish(result, ctx, lines)


@main.command("acl-delete")
@click.option("--account", "account_key", required=True, help="The account's access key.")
@admin_command
async def acl_delete(admin: AdminClient, ctx: AdminContext, account_key: str) -> None:
    """Delete an ACL account from every broker's ACL file (reloaded at once).

    \b
    Example:
      pymq-admin acl-delete --account app
    """
    result = await admin.acl_delete(account_key)
    lines = [
        f"{where}: error: {r['error']}"
        if "error" in r
        else f"{where}: {'deleted' if r.get('deleted') else 'not there'}"
        for where, r in result.items()
    ]
    finish(result, ctx, lines)
