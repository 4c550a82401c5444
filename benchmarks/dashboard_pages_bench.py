"""Dashboard page timings on a cluster of 4 brokers, 1,000 topics and 100 consumer groups (issue 33),
and what the dashboard's polls cost the brokers.

Starts real processes (a nameserver, 4 brokers, then pymq-dashboard), builds the topics and groups
through the admin client, requests every page ``--rounds`` times over HTTP and prints the median
and the slowest answer per page. Then it measures the 4 brokers' CPU over ``--cpu-window`` seconds
without a dashboard and again with one polling every 10 s (its default).

    python benchmarks/dashboard_pages_bench.py [--topics 1000] [--groups 100] [--rounds 10] [--cpu-window 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pymq.client import broker_api
from pymq.client.admin import AdminClient
from pymq.testing.processes import DaemonProcess, broker_process, namesrv_process

BROKERS = 4


async def build(ns: str, topics: int, groups: int) -> None:
    async with AdminClient(ns, timeout=30) as admin:
        while len(await admin.master_addrs()) < BROKERS:
            await asyncio.sleep(0.2)
        gate = asyncio.Semaphore(16)

        async def topic(i: int) -> None:
            async with gate:
                await admin.create_topic(f"topic-{i:04d}", 4)

        await asyncio.gather(*(topic(i) for i in range(topics)))
        masters = list((await admin.master_addrs()).values())

        async def group(i: int) -> None:
            async with gate:
                name = f"group-{i:03d}"
                await admin.update_subscription_group({"groupName": name})
                for addr in masters:  # each group has consumed part of one topic on every broker
                    for q in range(4):
                        await admin.broker_call(addr, broker_api.update_consumer_offset(name, f"topic-{i:04d}", q, 0))

        await asyncio.gather(*(group(i) for i in range(groups)))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def brokers_cpu(brokers: list[DaemonProcess], window: float) -> float:
    before = sum(cpu_seconds(b.pid) for b in brokers)
    time.sleep(window)
    return (sum(cpu_seconds(b.pid) for b in brokers) - before) / window / len(brokers) * 100


def get(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as resp:
        resp.read()
        assert resp.status == 200, (url, resp.status)
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--cpu-window", type=float, default=20.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dashboard-bench-"))
    started: list[DaemonProcess] = []
    try:
        ns = namesrv_process(work)
        started.append(ns.start())
        brokers = [
            broker_process(work, ns.address, f"broker-{i}", "--register-interval", "5").start() for i in range(BROKERS)
        ]
        started += brokers
        t0 = time.monotonic()
        asyncio.run(build(ns.address, args.topics, args.groups))
        print(
            f"built {args.topics} topics x 4 queues on {BROKERS} brokers, {args.groups} groups "
            f"in {time.monotonic() - t0:.1f} s"
        )
        time.sleep(6)  # one registration round: the routes of every topic
        idle = brokers_cpu(brokers, args.cpu_window)
        dash = DaemonProcess("dashboard", ["--namesrv", ns.address, "--port", "0"], work)
        started.append(dash.start())
        base = f"http://{dash.address}"
        pages = [
            "/cluster", "/topics", "/topics?page=10", "/topics?q=topic-09", "/topics/topic-0001",
            "/messages?topic=topic-0001&key=nothing", "/groups", "/groups/group-001", "/producers", "/dlq", "/pending",
            "/charts",
            "/messages/range?topic=topic-0001&begin=2020-01-01T00:00",
        ]  # fmt: skip
        print(f"{'page':<42}{'median ms':>10}{'max ms':>10}")
        for page in pages:
            get(base + page)  # warm: connections, templates
            times = [get(base + page) for _ in range(args.rounds)]
            print(f"{page:<42}{statistics.median(times):>10.1f}{max(times):>10.1f}")
        polling = brokers_cpu(brokers, args.cpu_window)
        print(
            f"broker CPU per broker over {args.cpu_window:.0f} s: {idle:.2f} % without the dashboard, "
            f"{polling:.2f} % with it polling every 10 s (page requests excluded)"
        )
    finally:
        for proc in reversed(started):
            proc.stop()


if __name__ == "__main__":
    main()
