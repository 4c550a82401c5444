"""The round-trip floor under pop + ack (issue 34): CPU per request whose handler does nothing.

    python benchmarks/pop_floor_bench.py [IN_FLIGHT ...]     (default: 1 4)

Client and broker in one process (as ``pop_bench.py``); ``IN_FLIGHT`` loops each send an
ACK_MESSAGE with an unverifiable handle (the broker answers at once: no store write) and await
it, 20,000 requests in all. With one request in flight this is what each coalesced ack batch of
``pop_bench``'s ``pop_ack`` costs before any work for its handles.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pymq.client import broker_api
from pymq.testing import LocalCluster
from pymq.transport.client import RpcClient

#: a temporary store: writes are not refused on a shared disk that is nearly full
STORE = {"disk_full_ratio": 0.99}


async def main(in_flight: int, n: int = 20_000) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="pymq-pop-floor-"))
    try:
        async with LocalCluster(base, brokers=1, small_store=False, store=STORE) as cluster:
            await cluster.create_topic("bench", 4)
            addr = cluster.brokers[0].address
            async with RpcClient() as rpc:
                await rpc.invoke(addr, broker_api.ack_message("g", "bench", "AAAA"), 3)
                sent = 0

                async def loop() -> None:
                    nonlocal sent
                    while sent < n:
                        sent += 1
                        await rpc.invoke(addr, broker_api.ack_message("g", "bench", "AAAA"), 3)

                t0, c0 = time.perf_counter(), time.process_time()
                await asyncio.gather(*(loop() for _ in range(in_flight)))
                elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
                return {"requests_per_s": n / elapsed, "cpu_us_per_request": cpu / n * 1e6}
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    counts = [int(a) for a in sys.argv[1:]] or [1, 4]
    print(json.dumps({str(k): asyncio.run(main(k)) for k in counts}))
