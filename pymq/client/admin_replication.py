"""The admin's side of a role change: promote a slave to its group's master (``pymq-admin broker-role``).

A switchover with the old master alive is three requests (see
:mod:`pymq.broker.role.change` for what each does on the broker):

1. FENCED to the old master: it refuses writes (producers move on to other groups) but
   keeps streaming to its slaves;
2. once the slave's commitlog ends where the master's does (``catch_up_timeout``), the slave
   becomes master with an epoch above both brokers' (brokerId 0);
3. the old master becomes a slave of the new one under the promoted slave's old id.

A slave that does not catch up is not promoted (the old master is unfenced: it starts a
new term) unless ``force``. With the old master unreachable, the slave is promoted only if
it held everything its master had last announced to it, or with ``force``; the old master,
when it comes back, finds the newer master registered and joins it as a slave (startup
fencing), truncating any tail the new master never received.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from pymq.client import broker_api
from pymq.errors import ClientError, PymqError
from pymq.protocol.headers import decode_body

if TYPE_CHECKING:
    from pymq.client.admin import AdminClient


async def group_members(admin: AdminClient, broker_name: str) -> dict[int, str]:
    """brokerId -> address of one broker group, as the nameserver has it."""
    info = await admin.cluster_info()
    group = (info.get("brokerAddrTable") or {}).get(broker_name)
    if not group:
        raise ClientError(f"broker group {broker_name!r} is unknown to the nameserver")
    return {int(k): v for k, v in (group.get("brokerAddrs") or {}).items()}


async def controller_status(admin: AdminClient) -> dict[str, Any]:
    """The failover controller's view from the first nameserver that runs one (issue 32): per broker
    group its master, epoch, sync-state set and live replicas (``groups``), and the last elections.
    With several controllers (etcd) the active one's answer is preferred; when only standbys
    answer, the first one's (``role`` "standby", ``activeController``, no groups).

    Raises :class:`~pymq.errors.ClientError` if no nameserver runs a controller.
    """
    last: Exception | None = None
    standby: dict[str, Any] | None = None
    for addr in admin.ns.addrs:
        try:
            resp = await admin.rpc.invoke_ok(addr, broker_api.controller_status(), admin.timeout)
        except PymqError as exc:
            last = exc
            continue
        status: dict[str, Any] = decode_body(resp.body, "controller status")
        if status.get("role") != "standby":
            return status
        standby = standby or status  # a standby of several (etcd): the active one is preferred
    if standby is not None:
        return standby
    raise ClientError(f"no nameserver runs a controller (start one with --controller embedded or etcd): {last}")


async def _status(admin: AdminClient, addr: str) -> dict[str, Any] | None:
    try:
        return await admin.broker_status(addr)
    except PymqError:
        return None


async def promote_slave(
    admin: AdminClient,
    broker_name: str,
    slave_addr: str,
    *,
    force: bool = False,
    role: str | None = None,
    catch_up_timeout: float = 10.0,
) -> dict[str, Any]:
    """Make ``slave_addr`` the master of ``broker_name``; returns what happened (see the module docstring)."""
    members = await group_members(admin, broker_name)
    ids = {addr: bid for bid, addr in members.items()}
    if slave_addr not in ids:
        raise ClientError(f"{slave_addr} is not registered in broker group {broker_name} ({members})")
    slave_id = ids[slave_addr]
    if slave_id == 0:
        raise ClientError(f"{slave_addr} is already the master of {broker_name}")
    slave = await admin.broker_status(slave_addr)
    master_addr = members.get(0)
    master = await _status(admin, master_addr) if master_addr else None
    new_role = role or (master["role"] if master and master.get("role") in ("ASYNC_MASTER", "SYNC_MASTER") else None)
    new_role = new_role or "ASYNC_MASTER"
    epoch = max(int(slave.get("epoch", 0)), int(master.get("epoch", 0)) if master else 0) + 1
    behind = 0
    if master is not None and master_addr is not None:
        await admin.broker_call(master_addr, broker_api.role_change("FENCED"))
        deadline = time.monotonic() + catch_up_timeout
        while True:
            m = await admin.broker_status(master_addr)
            s = await admin.broker_status(slave_addr)
            behind = int(m["commitLogMaxOffset"]) - int(s["commitLogMaxOffset"])
            if behind <= 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        if behind > 0 and not force:
            await admin.broker_call(master_addr, broker_api.role_change(str(master.get("role", "ASYNC_MASTER"))))
            raise ClientError(
                f"{slave_addr} is {behind} bytes behind its master {master_addr} after {catch_up_timeout:.0f}s: "
                "not promoted (the master takes writes again); --force promotes it anyway"
            )
    else:
        behind = max(0, int(slave.get("masterMaxOffset", 0)) - int(slave.get("commitLogMaxOffset", 0)))
        if not force and (behind > 0 or not slave.get("masterMaxOffset")):
            raise ClientError(
                f"master {master_addr or '(none registered)'} is unreachable and {slave_addr} cannot prove it holds "
                f"everything (last known lag {behind} bytes): --force promotes it anyway"
            )
    resp = await admin.broker_call(slave_addr, broker_api.role_change(new_role, epoch=epoch))
    state: dict[str, Any] = decode_body(resp.body)
    result: dict[str, Any] = {
        "brokerName": broker_name,
        "newMaster": slave_addr,
        "role": state.get("role"),
        "epoch": state.get("epoch"),
        "behindBytes": max(0, behind),
        "oldMaster": master_addr or "",
        "oldMasterNewId": None,
    }
    if master is not None and master_addr is not None:
        try:
            await admin.broker_call(
                master_addr, broker_api.role_change("SLAVE", master_addr=slave_addr, broker_id=slave_id)
            )
            result["oldMasterNewId"] = slave_id
        except PymqError as exc:
            result["oldMasterError"] = str(exc)
    return result
