"""SimpleConsumer receive + ack throughput against a push consumer on the same backlog (issue 17).

    python benchmarks/pop_bench.py [--messages 20000] [--receivers 4] [--json]

One in-process broker (LocalCluster, a temporary store), one topic with 4 queues, a backlog of
``--messages`` 128-byte messages. Measured, each from a fresh group over the whole backlog:

* ``push``: a PushConsumer (FIRST_OFFSET, a no-op listener) until every message was consumed;
* ``push32``: the same pulling at most 32 messages a request (``pull_batch_size=32``), the most a
  pop may take (RocketMQ's cap, MAX_POP_MSG_NUMS): the shape of ``pop_ack_many`` without its
  checkpoint, handles and ack (a plain pull takes up to 1,024);
* ``pop_ack``: one SimpleConsumer, ``--receivers`` concurrent loops of ``receive(32)`` then
  ``ack`` each message (a push consumer also has a pull per queue in flight);
* ``pop_ack_gather``: the same, each message acked by its own ``ack`` call, the batch's calls
  awaited together (``asyncio.gather``: the client sends them as one request);
* ``pop_ack_many``: the same with one ``ack_many`` per received batch.

Figures are messages per second, client and broker in one process (so one core does both), and
the process's CPU time per message (``<name>_cpu_us``; less sensitive to a busy machine). Each
clock runs from the consumer's start to its last message (its shutdown, and receivers left in a
long poll of the drained backlog, are not consumption time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

from pymq.client import ConsumeFromWhere, ConsumeResult, Message, Producer, PushConsumer, SimpleConsumer
from pymq.testing import LocalCluster


async def fill(cluster: LocalCluster, n: int) -> None:
    body = b"x" * 128
    async with Producer(cluster.namesrv_addr) as p:
        for start in range(0, n, 64):
            await p.send_batch([Message("bench", body) for _ in range(min(64, n - start))])


async def push_rate(
    cluster: LocalCluster, n: int, group: str, pull_batch_size: int | None = None
) -> tuple[float, float]:
    done = asyncio.Event()
    count = 0
    c = PushConsumer(
        cluster.namesrv_addr,
        group,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        pull_batch_size=pull_batch_size,
    )
    c.subscribe("bench")

    @c.listener
    async def on(msgs):  # type: ignore[no-untyped-def]
        nonlocal count
        count += len(msgs)
        if count >= n:
            done.set()
        return ConsumeResult.SUCCESS

    t0, cpu0 = time.perf_counter(), time.process_time()
    async with c:
        await asyncio.wait_for(done.wait(), 600)
        # (the consumer's shutdown is not consumption time)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return n / elapsed, cpu / n * 1e6


async def pop_rate(cluster: LocalCluster, n: int, group: str, *, ack: str, receivers: int) -> tuple[float, float]:
    """``ack``: "each" (awaited one by one), "gather" (one call each, awaited together) or "many"."""
    c = SimpleConsumer(cluster.namesrv_addr, group, await_duration=0)
    c.subscribe("bench")
    got = 0
    done = asyncio.Event()

    async def loop() -> None:
        nonlocal got
        while got < n:
            msgs = await c.receive(32, 60.0, await_duration=0.2)
            if ack == "many":
                await c.ack_many(msgs)
            elif ack == "gather":
                await asyncio.gather(*(c.ack(m) for m in msgs))
            else:
                for m in msgs:
                    await c.ack(m)
            got += len(msgs)
        done.set()

    t0, cpu0 = time.perf_counter(), time.process_time()
    async with c:
        loops = [asyncio.ensure_future(loop()) for _ in range(receivers)]
        await done.wait()
        # the clock stops at the last ack: the other receivers may sit in a long poll of the
        # drained backlog (up to its 0.2 s), which is not consumption time
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        for t in loops:
            t.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
    return n / elapsed, cpu / n * 1e6


async def main(n: int, receivers: int) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="pymq-pop-bench-"))
    try:
        async with LocalCluster(base, brokers=1, small_store=False) as cluster:
            await cluster.create_topic("bench", 4)
            await fill(cluster, n)
            runs = {
                "push": await push_rate(cluster, n, "bench-push"),
                "push32": await push_rate(cluster, n, "bench-push32", 32),
                "pop_ack": await pop_rate(cluster, n, "bench-pop", ack="each", receivers=receivers),
                "pop_ack_gather": await pop_rate(cluster, n, "bench-pop-gather", ack="gather", receivers=receivers),
                "pop_ack_many": await pop_rate(cluster, n, "bench-pop-batch", ack="many", receivers=receivers),
            }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    out = {name: rate for name, (rate, _cpu) in runs.items()}
    out.update({f"{name}_cpu_us": cpu for name, (_rate, cpu) in runs.items()})
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--receivers", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rates = asyncio.run(main(args.messages, args.receivers))
    if args.json:
        print(json.dumps(rates))
    else:
        for name in ("push", "pop_ack", "pop_ack_gather", "pop_ack_many"):
            rate, cpu = rates[name], rates[f"{name}_cpu_us"]
            print(f"{name:14s} {rate:10.0f} msg/s  ({rate / rates['push']:.2f}x push)  {cpu:6.1f} CPU-us/msg")
