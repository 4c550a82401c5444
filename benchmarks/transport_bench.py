"""Round-trip latency and requests/s of a trivial request (PING) over the transport.

One client on loopback; the server runs in a child process on its own core, like a real
broker. ``--pipeline N`` keeps N requests in flight for the throughput figure.

    python benchmarks/transport_bench.py --requests 20000 --pipeline 64 [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import time

from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.transport import Dispatcher, RpcClient, RpcServer
from pymq.transport.loop import new_event_loop


def serve(conn) -> None:  # type: ignore[no-untyped-def]
    from pymq.logs import configure_logging

    configure_logging("warning")

    async def main() -> None:
        server = RpcServer(Dispatcher({RequestCode.PING: lambda cmd, c: cmd.response()}), "127.0.0.1", 0)
        await server.start()
        conn.send(server.address)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await server.close()

    loop = new_event_loop()
    loop.run_until_complete(main())


async def measure(addr: str, requests: int, pipeline: int) -> dict[str, float]:
    async with RpcClient() as rpc:
        for _ in range(1000):  # warm up
            await rpc.invoke(addr, Command.request(RequestCode.PING))
        lat = []
        t0 = time.perf_counter()
        for _ in range(requests):
            t = time.perf_counter()
            await rpc.invoke(addr, Command.request(RequestCode.PING))
            lat.append(time.perf_counter() - t)
        seq_secs = time.perf_counter() - t0
        lat.sort()
        sem = asyncio.Semaphore(pipeline)

        async def one() -> None:
            async with sem:
                await rpc.invoke(addr, Command.request(RequestCode.PING))

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        pipe_secs = time.perf_counter() - t0
    return {
        "requests": requests,
        "sequential_req_per_sec": round(requests / seq_secs, 1),
        "rtt_us_p50": round(lat[len(lat) // 2] * 1e6, 1),
        "rtt_us_p99": round(lat[int(len(lat) * 0.99)] * 1e6, 1),
        "rtt_us_max": round(lat[-1] * 1e6, 1),
        "pipeline": pipeline,
        "pipelined_req_per_sec": round(requests / pipe_secs, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--pipeline", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(child,), daemon=True)
    proc.start()
    try:
        addr = parent.recv()
        loop = new_event_loop()
        result = loop.run_until_complete(measure(addr, args.requests, args.pipeline))
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:>24}: {v}")


if __name__ == "__main__":
    main()
