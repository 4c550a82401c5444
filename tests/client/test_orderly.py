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

from pymq.client import ConsumeFromWhere, ConsumeOrderlyResult, Message, Producer, PushConsumer, SelectByHash
from pymq.client.consume_orderly import OrderlyConsumeService
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

    @property
    def ready_file(self) -> Path:
        return Path(f"{self.out}.{self.name}.ready")

    async def ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
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
    return [(name, order, step, 0) for name, order, step, _qid, _off in read_rows(out)]


def read_rows(out: Path) -> list[tuple[str, str, int, int, int]]:
    """Every OK line in processing order: (consumer, order, step, queue id, queue offset)."""
    rows = []
    for line in out.read_text().splitlines():
        name, kind, body, qid, off = line.split()
        order, step = body.split(":")
        if kind == "OK":
            rows.append((name, order, int(step), int(qid), int(off)))
    return rows


async def test_orders_stay_in_order_while_a_consumer_dies_and_another_joins(tmp_path: Path) -> None:
    """100 orders x 10 steps: each order's steps are processed in send order, none lost, despite kill -9 and a join.

    Three orderly consumers (c0 suspends every 37th message once: injected local retries)
    consume 8 queues; c1 is SIGKILLed after step 3 is sent and c3 joins after step 6. The
    log lines are appended in processing order (a queue is consumed by one process at a
    time, and a new owner starts only after the old one's lock is released or expired).

    What the code guarantees, and what is checked:

    * per queue, offsets are processed consecutively from 0; a new owner starts at the
      group's committed offset. A rebalance hand-over commits before it unlocks, so it
      continues exactly after the last processed offset. Only the killed consumer's queues
      may go back: their new owner restarts at the offset c1 had committed when it died
      (read from the broker right after the kill), re-running c1's uncommitted tail.
    * per order (one queue), the steps are therefore 0, 1, ..., k, then either k + 1, ..., 9
      or, once, a replay j, j + 1, ..., 9 with j <= k, where steps j..k were the last ones c1
      processed (a contiguous suffix, done by c1 only) and c1 does nothing afterwards.
    * the joining consumer takes queues over and consumes some of the later steps.
    """
    out = tmp_path / "consumed.log"
    out.touch()
    async with LocalCluster(
        tmp_path / "c",
        brokers=1,
        broker={"queue_lock_expiry_seconds": 3.0, "client_scan_interval_seconds": 1.0},
    ) as cluster:
        await cluster.create_topic("orders", 8)
        offsets = cluster.brokers[0].offsets
        procs = [ConsumerProc(cluster.namesrv_addr, f"c{i}", out, fail_every=37 if i == 0 else 0) for i in range(3)]
        committed_at_kill: dict[int, int] = {}
        try:
            for p in procs:
                await p.ready()
            assert len({p.ready_file for p in procs}) == 3
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
                        # Let the broker (on this loop) take in what c1 sent before dying; its
                        # queues stay locked for seconds more, so nobody else commits them yet.
                        await asyncio.sleep(0.3)
                        committed_at_kill = offsets.offsets_of("og", "orders")
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
        # Stricter: at most one step back, to a contiguous suffix of what c1 did last.
        jumps = [i for i in range(1, len(steps)) if steps[i] != steps[i - 1] + 1]
        assert steps[0] == 0 and len(jumps) <= 1, f"{order}: {seq}"
        if jumps:
            head, tail = seq[: jumps[0]], seq[jumps[0] :]
            j, k = tail[0][1], head[-1][1]
            assert j <= k and [s for _, s in tail] == list(range(j, STEPS)), f"{order}: {seq}"
            assert {n for n, _ in head[j:]} == {"c1"}, f"{order}: replayed steps not c1's last ones: {seq}"
            assert "c1" not in {n for n, _ in tail}, f"{order}: c1 consumed after its replay began: {seq}"
    assert duplicates <= 40, duplicates
    # Per queue: consecutive offsets from 0; the only step back is to the offset c1 had committed.
    by_queue: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for name, _order, _step, qid, off in read_rows(out):
        by_queue[qid].append((name, off))
    c1_queues = {qid for qid, seq in by_queue.items() if any(n == "c1" for n, _ in seq)}
    assert c1_queues, "the killed consumer had consumed nothing"
    for qid, seq in by_queue.items():
        assert seq[0][1] == 0, f"queue {qid} did not start at offset 0"
        for (name_a, a), (name_b, b) in itertools.pairwise(seq):
            if b == a + 1:
                continue
            assert (qid, name_a) in {(q, "c1") for q in c1_queues} and name_b != "c1", (qid, name_a, a, name_b, b)
            assert b == committed_at_kill.get(qid), f"queue {qid}: replay from {b}, committed {committed_at_kill}"
    assert any(name == "c3" for name, *_ in rows), "the joining consumer consumed nothing"
    print(f"duplicates {duplicates}; c3 consumed {sum(1 for r in rows if r[0] == 'c3')}; committed {committed_at_kill}")


async def test_orderly_hand_over_starts_after_the_previous_owners_last_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue handed over by rebalance is not consumed twice, even when the previous owner commits late.

    The first consumer's committed offsets lag behind what it processed (the periodic commit is
    60 s away; pulls carry the offset as of their sending) until it lets a queue go and
    commits, and the joiner's lock request is held back until that hand-over is complete.
    The joiner must read the queue's offset under its lock, i.e. after the previous owner's
    final commit; an offset read before locking would be stale and replay the queue.
    """
    client = {
        "rebalance_interval_seconds": 60.0,
        "heartbeat_interval_seconds": 1.0,
        "persist_offset_interval_seconds": 60.0,
    }
    seen: list[tuple[str, int, int]] = []
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster:
        await cluster.create_topic("orders", 2)
        broker = cluster.brokers[0]

        def orderly(name: str) -> PushConsumer:
            c = PushConsumer(
                cluster.namesrv_addr,
                "hg",
                instance_name=name,
                consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                **client,
            )
            c.subscribe("orders")

            @c.orderly_listener
            async def on(msgs):
                seen.extend((name, m.queue_id, m.queue_offset) for m in msgs)
                return ConsumeOrderlyResult.SUCCESS

            return c

        first = orderly("h0")
        await first.start()
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(20):
                await p.send(Message("orders", f"h{i}".encode()), selector=SelectByHash(), arg=i)
        deadline = time.monotonic() + 10
        while len(seen) < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert len(seen) == 20
        # Precondition: the broker's committed offsets (carried by pulls) lag behind what was processed.
        assert sum(broker.offsets.offsets_of("hg", "orders").values()) < 20

        real_lock = OrderlyConsumeService.can_take

        async def lock_after_hand_over(self: OrderlyConsumeService, mq):  # type: ignore[no-untyped-def]
            if self is not first.service:
                end = time.monotonic() + 10
                while broker.locks.holder("hg", mq) is not None and time.monotonic() < end:
                    await asyncio.sleep(0.01)
            return await real_lock(self, mq)

        monkeypatch.setattr(OrderlyConsumeService, "can_take", lock_after_hand_over)
        second = orderly("h1")
        await second.start()
        try:
            taken = {mq.queueId for mq in second.assigned_queues() if mq.topic == "orders"}
            assert len(taken) == 1, second.assigned_queues()
            async with Producer(cluster.namesrv_addr) as p:
                for i in range(20, 40):
                    await p.send(Message("orders", f"h{i}".encode()), selector=SelectByHash(), arg=i)
            deadline = time.monotonic() + 10
            while len({(q, o) for _, q, o in seen}) < 40 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
        finally:
            await second.close()
            await first.close()
    positions = [(q, o) for _, q, o in seen]
    assert len(set(positions)) == 40, "lost messages"
    assert len(positions) == 40, f"{len(positions) - 40} messages consumed twice after the hand-over"
    assert any(name == "h1" for name, *_ in seen)
