"""``pymq-admin broker-role``, and the replication columns of ``cluster-list``."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from pymq.cli.admin_group import AdminContext, admin_command, main
from pymq.cli.output import emit, key_values, table
from pymq.client.admin import AdminClient
from pymq.client.admin_replication import controller_status as controller_status_of
from pymq.client.admin_replication import promote_slave
from pymq.controller.leadership import ACTIVE_CONTROLLER
from pymq.errors import InvalidRequestError, PymqError, error_for_response
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.requests import ControllerElectRequest


@main.command("broker-role")
@click.option("--broker-name", required=True, help="The broker group (brokerName).")
@click.option("--promote", "slave_addr", required=True, help="Address of the slave to make master.")
@click.option("--force", is_flag=True, help="Promote even if the slave may not hold all of the master's data.")
@click.option(
    "--role",
    type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER"]),
    default=None,
    help="Role of the new master (default: the old master's, else ASYNC_MASTER).",
)
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait for the slave to catch up.")
@admin_command
async def broker_role(
    admin: AdminClient,
    ctx: AdminContext,
    broker_name: str,
    slave_addr: str,
    force: bool,
    role: str | None,
    timeout: float,
) -> None:
    """Make a slave its group's master (brokerId 0, a new epoch); the old master, if alive, follows it.

    The old master is fenced first (no writes), the slave must then hold its whole commitlog
    (else nothing changes, unless --force), and the old master becomes a slave under the
    promoted slave's old id.

    \b
    Example:
      pymq-admin broker-role --broker-name broker-a --promote 10.0.0.2:10911
    """
    result = await promote_slave(admin, broker_name, slave_addr, force=force, role=role, catch_up_timeout=timeout)
    emit(result, ctx.as_json, key_values(result))


async def replication_columns(admin: AdminClient, rows: list[dict[str, Any]]) -> None:
    """Add each broker's role, epoch and replication lag (from its runtime info) to cluster-list rows."""

    async def one(row: dict[str, Any]) -> None:
        try:
            info = await admin.broker_status(row["addr"])
        except PymqError:
            row.update(role="unreachable", epoch="", lagBytes="")
            return
        row.update(
            role=info.get("role", row["role"]),
            epoch=info.get("epoch", ""),
            lagBytes=info.get("replicationLagBytes", ""),
        )

    await asyncio.gather(*(one(r) for r in rows))


@main.command("controller-status")
@admin_command
async def controller_status(admin: AdminClient, ctx: AdminContext) -> None:
    """The failover controller's view (issue 32): per broker group its master, epoch, sync-state set
    and live replicas, and the last elections with their reasons.

    Asks each nameserver in turn; the first one running a controller (``--controller embedded|etcd``)
    answers, the active one preferred; a standby says it is one and names the active controller.

    \b
    Example:
      pymq-admin -n 127.0.0.1:9876 controller-status
    """
    status = await controller_status_of(admin)
    groups = [
        {
            "group": name,
            "master": g.get("master") or "-",
            "epoch": g.get("epoch"),
            "syncSet": ",".join(g.get("syncSet", [])),
            "alive": ",".join(g.get("alive", [])),
        }
        for name, g in status.get("groups", {}).items()
    ]
    cols = [("group", "GROUP"), ("master", "MASTER"), ("epoch", "EPOCH"), ("syncSet", "SYNC-STATE SET"),
            ("alive", "ALIVE")]  # fmt: skip
    history = [
        f"  epoch {e['epoch']}: {e['group']} {e.get('old') or '-'} -> {e.get('new')} ({e['reason']})"
        for e in status.get("elections", [])
    ]
    human = table(groups, cols) + ("\nelections:\n" + "\n".join(history) if history else "")
    emit(status, ctx.as_json, _role_line(status) + human)


def _role_line(status: dict[str, Any]) -> str:
    """``controller ADDR: active`` or ``controller ADDR: standby (active controller: X)``."""
    me = status.get("controller")
    if not me:
        return ""  # a single (embedded) controller of an older nameserver
    if status.get("role") == "standby":
        return f"controller {me}: standby (active controller: {status.get('activeController') or 'none yet'})\n"
    return f"controller {me}: active\n"


@main.command("elect-master")
@click.option("--broker-name", required=True, help="The broker group (brokerName).")
@click.option("--broker-addr", default="", help="The in-sync replica to make master (default: the best one).")
@admin_command
async def elect_master(admin: AdminClient, ctx: AdminContext, broker_name: str, broker_addr: str) -> None:
    """Move a group's mastership through the controller: the master's lease is let lapse (it stops
    taking writes), then an in-sync replica is elected at a new epoch and the old master follows it.

    \b
    Example:
      pymq-admin elect-master --broker-name broker-a
      pymq-admin elect-master --broker-name broker-a --broker-addr 10.0.0.2:10911
    """
    ext = ControllerElectRequest(broker_name=broker_name, broker_addr=broker_addr).to_ext()
    last: Exception | None = None
    order = list(admin.ns.addrs)
    i = 0
    while i < len(order):
        addr = order[i]
        i += 1
        cmd = Command.request(RequestCode.CONTROLLER_ELECT_MASTER, ext)
        try:
            resp = await admin.rpc.invoke(addr, cmd, admin.timeout + 10.0)
        except PymqError as exc:
            last = exc
            continue
        active = (resp.ext or {}).get(ACTIVE_CONTROLLER)
        if resp.code != ResponseCode.SUCCESS and isinstance(active, str) and active not in order[:i]:
            order.insert(i, active)  # a standby of several: ask the active controller it names next
        if resp.code != ResponseCode.SUCCESS:
            error = error_for_response(resp.code, resp.remark, addr)
            if isinstance(error, InvalidRequestError):
                raise error
            last = error
            continue
        group: dict[str, Any] = decode_body(resp.body, "group state")
        emit(group, ctx.as_json, f"{broker_name}: master {group.get('master')} at epoch {group.get('epoch')}")
        return
    raise PymqError(f"no active controller answered (start one with --controller embedded or etcd): {last}")
