"""One consumer client of 10,000 queues against a broker daemon (issue 36).

* ``held_pulls`` — ``--queues`` long-polling pulls (one per queue, nothing to read) sent on
  one connection and held by the broker: the broker's RSS growth per held pull, and the
  p50/p99 of GET_MAX_OFFSET on that same connection while they are held.
* ``consume`` — ``--messages`` messages per queue are stored first; then a push consumer
  (FIRST_OFFSET, one client) starts: seconds until every message is consumed, and until
  the broker has every queue's offset committed (read with QUERY_QUEUE_OFFSETS).
* ``idle`` — the consumer idle, its queues waiting (WAIT_QUEUE_ARRIVAL rounds): the rounds
  out, and the p50/p99 of GET_MAX_OFFSET on the consumer's own connection.
* ``broker_bytes_per_waiting_queue`` — what a queue in a WAIT_QUEUE_ARRIVAL round costs the
  hold service (``hold_many`` traced with tracemalloc, in process; not counting the round's
  decoded body and task, shared by its 256 queues).

The broker runs as a daemon (``pymq.cli.broker``), so its RSS is its own (``/proc``). Storing
the messages first touches 10,000 queues (a file each): minutes on a shared disk.

    nice -n 10 python benchmarks/many_queues_bench.py [--queues 10000] [--topics 10] [--messages 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pymq.client import broker_api
from pymq.client.admin import AdminClient
from pymq.client.consumer_types import ConsumeFromWhere, ConsumeResult
from pymq.client.producer import Producer
from pymq.client.push_consumer import PushConsumer
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.message import Message, MessageExt
from pymq.protocol.requests import MAX_QUEUES_PER_REQUEST
from pymq.protocol.route import MessageQueue
from pymq.testing import broker_process, namesrv_process
from pymq.transport.client import RpcClient

BROKER = "broker-a"


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def latencies(rpc: RpcClient, addr: str, topic: str, n: int) -> dict[str, float]:
    """p50/p99/max (ms) of GET_MAX_OFFSET, one after the other."""
    out = []
    for i in range(n):
        cmd = broker_api.queue_offset(RequestCode.GET_MAX_OFFSET, topic, i % 8)
        started = time.perf_counter()
        resp = await rpc.invoke(addr, cmd, 10.0)
        out.append((time.perf_counter() - started) * 1000)
        assert resp.code == ResponseCode.SUCCESS
    out.sort()
    return {"p50_ms": statistics.median(out), "p99_ms": out[int(len(out) * 0.99) - 1], "max_ms": out[-1]}


async def committed_queues(rpc: RpcClient, addr: str, group: str, mqs: list[MessageQueue], want: int) -> int:
    """How many of ``mqs`` have ``want`` committed for ``group`` (QUERY_QUEUE_OFFSETS)."""
    n = 0
    for i in range(0, len(mqs), MAX_QUEUES_PER_REQUEST):
        chunk = mqs[i : i + MAX_QUEUES_PER_REQUEST]
        resp = await rpc.invoke_ok(addr, broker_api.query_queue_offsets(group, chunk), 10.0)
        n += sum(1 for committed, *_ in broker_api.read_queue_offsets(resp, len(chunk)) if committed == want)
    return n


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    ns = namesrv_process(workdir).start()
    broker = None
    try:
        broker = broker_process(workdir, ns.address, BROKER).start()
        addr = broker.address
        per_topic = args.queues // args.topics
        topics = [f"many{i}" for i in range(args.topics)]
        mqs = [MessageQueue(t, BROKER, q) for t in topics for q in range(per_topic)]
        async with AdminClient(ns.address) as admin:
            for t in topics:
                await admin.create_topic(t, per_topic)
        started = time.perf_counter()
        async with Producer(ns.address, instance_name="bench-producer") as p:
            assert p.instance is not None
            for t in topics:
                while not await p.instance.routes.read_queues(t):
                    await asyncio.sleep(0.1)
            for _ in range(args.messages):
                for i in range(0, len(mqs), 500):
                    await asyncio.gather(
                        *(p.send(Message(mq.topic, b"x" * 100), queue=mq, timeout=30.0) for mq in mqs[i : i + 500])
                    )
        out: dict[str, Any] = {"queues": len(mqs), "messages": len(mqs) * args.messages}
        out["produce_seconds"] = round(time.perf_counter() - started, 2)

        # --- held pulls: one per queue, on one connection --------------------------------------------
        await asyncio.sleep(1.0)
        before = rss_bytes(broker.pid)
        async with RpcClient() as rpc:
            pulls = [
                asyncio.ensure_future(
                    rpc.invoke(
                        addr,
                        broker_api.pull_message("held", mq, args.messages, max_nums=32, suspend_ms=args.hold_ms),
                        args.hold_ms / 1000 + 30,
                    )
                )
                for mq in mqs
            ]
            # Requests of one connection are read in order: once this is answered every pull was
            # dispatched; a moment more for their holds to start.
            await rpc.invoke(addr, broker_api.queue_offset(RequestCode.GET_MAX_OFFSET, topics[0], 0), 30.0)
            await asyncio.sleep(1.0)
            held = rss_bytes(broker.pid)
            lat = await latencies(rpc, addr, topics[0], args.samples)
            assert not any(f.done() for f in pulls), "a pull was answered before its suspend time"
            out["held_pulls"] = {
                "held": len(pulls),
                "broker_rss_growth_mb": round((held - before) / 2**20, 1),
                "broker_bytes_per_held_pull": (held - before) // len(pulls),
                "same_connection_get_max_offset": lat,
            }
            await asyncio.gather(*pulls)  # answered at their suspend time
        await asyncio.sleep(1.0)

        # --- one consumer of every queue ----------------------------------------------------------
        consumed = 0
        done = asyncio.Event()
        total = len(mqs) * args.messages

        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            nonlocal consumed
            consumed += len(msgs)
            if consumed >= total:
                done.set()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            ns.address, "bench-many", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, instance_name="bench"
        )
        for t in topics:
            consumer.subscribe(t)
        consumer.register_listener(listener)
        started = time.perf_counter()
        await consumer.start()
        try:
            out["consume"] = {"rebalance_seconds": round(time.perf_counter() - started, 2)}
            await asyncio.wait_for(done.wait(), args.timeout)
            out["consume"]["all_consumed_seconds"] = round(time.perf_counter() - started, 2)
            async with RpcClient() as rpc:
                while await committed_queues(rpc, addr, "bench-many", mqs, args.messages) < len(mqs):
                    assert time.perf_counter() - started < args.timeout, "offsets not committed"
                    await asyncio.sleep(0.2)
            out["consume"]["all_committed_seconds"] = round(time.perf_counter() - started, 2)
            await asyncio.sleep(2.0)  # idle: every queue waiting
            assert consumer.instance is not None and consumer.arrivals is not None
            out["idle"] = {
                "wait_rounds_out": consumer.arrivals.rounds,
                "consumer_connection_get_max_offset": await latencies(
                    consumer.instance.rpc, addr, topics[0], args.samples
                ),
            }
        finally:
            await consumer.close()
        return out
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()


async def wait_entry_bytes(queues: int, batch: int = 256) -> int:
    """Bytes per queue of WAIT_QUEUE_ARRIVAL holds (``hold_many`` in rounds of ``batch``), traced in process:
    the broker's RSS cannot tell them apart from what the held pulls before them freed."""
    import tracemalloc

    from pymq.broker.long_polling import PullHoldService

    hold = PullHoldService()
    waits = [(f"many{q % 10}", q // 10, 5) for q in range(queues)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    futs = [hold.hold_many(waits[i : i + batch], 60.0) for i in range(0, queues, batch)]
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    hold.wake_all()
    await asyncio.sleep(0)
    assert all(f.done() for f in futs)
    return used // queues


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--messages", type=int, default=5, help="messages per queue")
    ap.add_argument("--hold-ms", type=int, default=20_000, help="suspend time of the held pulls")
    ap.add_argument("--samples", type=int, default=2_000)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pymq-many-") as d:
        out = asyncio.run(run(args, Path(d)))
    out["broker_bytes_per_waiting_queue"] = asyncio.run(wait_entry_bytes(args.queues))
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
