"""The charts' data: the dashboard polls the cluster itself (no Prometheus needed).

Each round reads every broker's runtime info (put/get TPS) and every subscription group's
progress (total lag) through the admin client, and records them in a :class:`History`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pymq.client.admin import AdminClient
from pymq.dashboard.history import History
from pymq.dashboard.state import bounded_gather
from pymq.errors import PymqError

log = logging.getLogger("pymq.dashboard.poller")


class Poller:
    def __init__(self, admin: AdminClient, history: History, interval: float) -> None:
        self.admin = admin
        self.history = history
        self.interval = interval
        self.rounds = 0
        #: the last poll's per-topic totals and when it was made (rates are deltas between two polls)
        self._traffic: tuple[float, dict[str, tuple[int, int]]] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="dashboard-poller")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except (PymqError, OSError) as exc:
                log.warning("dashboard poll failed: %s", exc)
            except Exception:  # a bug of ours must not end the charts: say so and poll again
                log.exception("dashboard poll failed")
            await asyncio.sleep(self.interval)

    async def _progress(self, group: str) -> dict[str, Any] | None:
        try:
            return await self.admin.consumer_progress(group)
        except PymqError:
            return None

    async def _topic_rates(self, now: float) -> None:
        """Messages in and out per second of each topic with traffic since the previous poll."""
        totals = await self.admin.topic_traffic()
        previous, self._traffic = self._traffic, (now, totals)
        if previous is None or now <= previous[0]:
            return
        elapsed = now - previous[0]
        for topic, (put, get) in totals.items():
            before = previous[1].get(topic, (0, 0))
            if (put, get) != before or f"tput:{topic}" in self.history.series:
                # (a restarted broker's counters go back: no negative rates)
                self.history.record(f"tput:{topic}", now, max(0, put - before[0]) / elapsed)
                self.history.record(f"tget:{topic}", now, max(0, get - before[1]) / elapsed)

    async def poll_once(self) -> None:
        now = time.time()
        info = await self.admin.cluster_info()
        for name, bd in sorted((info.get("brokerAddrTable") or {}).items()):
            for bid, addr in sorted((bd.get("brokerAddrs") or {}).items()):
                try:
                    status = await self.admin.broker_status(addr)
                except PymqError:
                    continue
                label = f"{name}/{bid}"
                self.history.record(f"put:{label}", now, float(status.get("putTps", 0)))
                self.history.record(f"get:{label}", now, float(status.get("getTps", 0)))
        await self._topic_rates(now)
        groups = [g for g in await self.admin.group_list() if not g.startswith(("PYMQ_", "CID_RMQ_SYS_", "TOOLS_"))]
        for group, progress in zip(groups, await bounded_gather([self._progress(g) for g in groups]), strict=True):
            if progress is not None and progress["queues"]:
                self.history.record(f"lag:{group}", now, float(progress["totalLag"]))
        self.rounds += 1
