"""Broker-side CPU of the pop handlers, called directly (no sockets, no client): issue 34.

    python benchmarks/pop_handler_bench.py

One in-process broker (LocalCluster) with 40,000 128-byte messages in 4 queues. Prints CPU µs
per call of: a pop of 32 (``pop32_us``), a batch ack of those 32 handles (``batch_ack32_us``:
pop_bench's ``ack_many`` shape), a batch ack of 4 handles of 4 checkpoints
(``batch_ack4_from_4_cks_us``: what the single acks of 4 receivers become once the client
coalesces them) and a single ack (``single_ack_us``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import tempfile
import time
from pathlib import Path

from pymq.client import Message, Producer, broker_api
from pymq.testing import LocalCluster

#: a temporary store: writes are not refused on a shared disk that is nearly full
STORE = {"disk_full_ratio": 0.99}


async def main() -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="pymq-pop-handlers-"))
    try:
        async with LocalCluster(base, brokers=1, small_store=False, store=STORE) as cluster:
            await cluster.create_topic("bench", 4)
            async with Producer(cluster.namesrv_addr) as p:
                for _ in range(0, 40_000, 64):
                    await p.send_batch([Message("bench", b"x" * 128) for _ in range(64)])
            handlers = cluster.brokers[0].pop._handlers
            assert handlers is not None

            def pop(n: int, queue: int) -> list[str]:
                cmd = broker_api.pop_message("g", "bench", "*", max_nums=n, invisible_ms=60_000, poll_ms=0, born_time=0)
                cmd.ext["queueId"] = str(queue)
                resp = handlers.pop(cmd, None)  # type: ignore[arg-type]
                assert not isinstance(resp, Exception)
                return broker_api.read_pop_handles(resp)  # type: ignore[arg-type]

            def cpu(fn) -> float:  # type: ignore[no-untyped-def]
                c0 = time.process_time()
                fn()
                return time.process_time() - c0

            gc.collect()
            gc.freeze()
            out: dict[str, float] = {}
            popped: list[list[str]] = []
            rounds = 300
            out["pop32_us"] = sum(cpu(lambda i=i: popped.append(pop(32, i % 4))) for i in range(rounds)) / rounds * 1e6
            acks = [broker_api.batch_ack("g", "bench", hs) for hs in popped]
            spent = sum(cpu(lambda cmd=cmd: handlers.batch_ack(cmd, None)) for cmd in acks)
            out["batch_ack32_us"] = spent / rounds * 1e6
            spent, calls = 0.0, 0  # (reset: the 4-checkpoint shape)
            for _ in range(60):
                batches = [pop(32, q) for q in range(4)]
                for j in range(32):
                    four = [b[j] for b in batches]
                    spent += cpu(lambda four=four: handlers.batch_ack(broker_api.batch_ack("g", "bench", four), None))
                    calls += 1
            out["batch_ack4_from_4_cks_us"] = spent / calls * 1e6
            singles = [h for q in range(4) for h in pop(32, q)]
            out["single_ack_us"] = (
                cpu(lambda: [handlers.ack(broker_api.ack_message("g", "bench", h), None) for h in singles])
                / len(singles)
                * 1e6
            )
            return out
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps({k: round(v, 1) for k, v in asyncio.run(main()).items()}))
