"""The Cluster page: nameservers, broker groups and each broker's role, epoch, version, disk and TPS,
and the failover controller's view when a nameserver runs one."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pymq.client.admin import AdminClient
from pymq.client.admin_replication import controller_status
from pymq.dashboard.state import admin_of, get_state, render
from pymq.errors import PymqError


async def broker_rows(admin: AdminClient) -> list[dict[str, Any]]:
    """One row per registered broker: what the nameserver says, plus its own runtime info."""
    info = await admin.cluster_info()
    rows: list[dict[str, Any]] = []
    for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
        for name in sorted(names):
            addrs = (info.get("brokerAddrTable") or {}).get(name, {}).get("brokerAddrs", {})
            for bid, addr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                rows.append({"cluster": cluster, "brokerName": name, "brokerId": int(bid), "addr": addr})

    async def status(row: dict[str, Any]) -> None:
        try:
            row["status"] = await admin.broker_status(row["addr"])
        except PymqError as exc:
            row["error"] = str(exc)

    await asyncio.gather(*(status(r) for r in rows))
    return rows


async def controller_view(admin: AdminClient) -> dict[str, Any] | None:
    """The controller's groups and elections (newest first), or None when no nameserver runs one."""
    try:
        status = await controller_status(admin)
    except PymqError:
        return None
    groups = [{"group": name, **g} for name, g in sorted((status.get("groups") or {}).items())]
    return {"groups": groups, "elections": list(reversed(status.get("elections") or []))}


async def cluster_page(request: Request) -> Response:
    admin = admin_of(request)
    rows, controller = await asyncio.gather(broker_rows(admin), controller_view(admin))
    namesrvs = get_state(request).config.namesrv_addrs
    return render(request, "cluster.html", brokers=rows, namesrvs=namesrvs, controller=controller)


routes = [Route("/", cluster_page), Route("/cluster", cluster_page)]
