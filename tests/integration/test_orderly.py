"""Orderly consumption across processes: three consumers, one killed, one joining, orders stay in order."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from pymq.client import Message, Producer, SelectByHash
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration

APP = Path(__file__).parent / "apps" / "orderly_consumer.py"
ORDERS, STEPS = 100, 10


class ConsumerProc:
    def __init__(self, namesrv: str, name: str, out: Path, fail_every: int = 0) -> None:
        self.name = name
        self.out = out
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "ORDERLY_LOG": "info"}
        self.proc = subprocess.Popen(
            [sys.executable, str(APP), namesrv, "og", name, str(out), str(fail_every)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(str(out) + f".{name}.err", "w"),  # noqa: SIM115
        )

    async def ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not Path(str(self.out) + ".ready").exists():
            assert self.proc.poll() is None, f"{self.name} exited with {self.proc.returncode}"
            assert time.monotonic() < deadline, f"{self.name} did not start"
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def read_log(out: Path) -> list[tuple[str, str, int, int]]:
    rows = []
    for line in out.read_text().splitlines():
        name, kind, body, _qid, _off = line.split()
        order, step = body.split(":")
        if kind == "OK":
            rows.append((name, order, int(step), 0))
    return rows


async def test_orders_stay_in_order_while_a_consumer_dies_and_another_joins(tmp_path: Path) -> None:
    """100 orders x 10 steps: each order's steps are processed in send order, none lost, despite kill -9 and a join."""
    out = tmp_path / "consumed.log"
    out.touch()
    async with LocalCluster(
        tmp_path / "c",
        brokers=1,
        broker={"queue_lock_expiry_seconds": 3.0, "client_scan_interval_seconds": 1.0},
    ) as cluster:
        await cluster.create_topic("orders", 8)
        procs = [ConsumerProc(cluster.namesrv_addr, f"c{i}", out, fail_every=37 if i == 0 else 0) for i in range(3)]
        try:
            for p in procs:
                await p.ready()
            await asyncio.sleep(2.0)  # rebalanced and locked
            selector = SelectByHash()
            async with Producer(cluster.namesrv_addr) as producer:
                for step in range(STEPS):
                    for order in range(ORDERS):
                        await producer.send(
                            Message("orders", f"o{order}:{step}".encode()), selector=selector, arg=order
                        )
                    if step == 3:
                        procs[1].proc.kill()  # SIGKILL mid-stream: its locks expire on the broker
                        procs[1].proc.wait(5)
                    if step == 6:
                        joiner = ConsumerProc(cluster.namesrv_addr, "c3", out)
                        procs.append(joiner)
                        await joiner.ready()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = {(o, s) for _, o, s, _ in read_log(out)}
                if len(done) == ORDERS * STEPS:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
        finally:
            # The broker runs on this event loop: wait for the consumers off-loop so they can say goodbye.
            await asyncio.gather(*(asyncio.to_thread(p.stop) for p in procs))
    rows = read_log(out)
    by_order: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for name, order, step, _ in rows:
        by_order[order].append((name, step))
    assert len(by_order) == ORDERS
    duplicates = 0
    for order, seq in by_order.items():
        steps = [s for _, s in seq]
        first_seen = list(dict.fromkeys(steps))
        assert first_seen == list(range(STEPS)), f"{order}: {seq}"
        # A step may be consumed twice only when the killed consumer did it first and died before
        # committing its offset: the new owner replays from the committed offset, in order.
        seen: dict[int, str] = {}
        for name, s in seq:
            if s in seen:
                duplicates += 1
                assert seen[s] == "c1", f"{order}: step {s} repeated but first done by {seen[s]}: {seq}"
                continue
            seen[s] = name
        replay = [s for _, s in seq]
        for a, b in itertools.pairwise(replay):
            assert b == a + 1 or b <= a, f"{order} skipped a step: {seq}"
    assert duplicates <= 40, duplicates
