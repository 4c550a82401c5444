"""Background services share one start/stop interface."""

from __future__ import annotations

import asyncio

from pymq.broker.service import PeriodicService, Service


async def test_periodic_service_runs_until_stopped_and_survives_failures() -> None:
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("one bad run does not stop the schedule")

    svc: Service = PeriodicService("tick", 0.01, tick)
    await svc.start()
    for _ in range(200):
        if len(calls) >= 4:
            break
        await asyncio.sleep(0.01)
    await svc.stop()
    seen = len(calls)
    assert seen >= 4
    await asyncio.sleep(0.05)
    assert len(calls) == seen  # stopped
    await svc.stop()  # twice is harmless


async def test_periodic_service_waits_one_interval_before_the_first_call() -> None:
    calls: list[int] = []
    svc = PeriodicService("slow", 10.0, lambda: calls.append(1))
    await svc.start()
    await asyncio.sleep(0.02)
    await svc.stop()
    assert calls == []
