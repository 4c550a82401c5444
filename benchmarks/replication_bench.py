"""Produce throughput and latency of one broker group with no slave, an ASYNC_MASTER slave and a
SYNC_MASTER slave, measured in the same run (the ratios are the figure), plus the slave's lag.

Every mode starts its own nameserver, master and slave as real processes (small store files
under a temporary directory), creates a topic, then ``--producers`` asyncio producers send
``--size``-byte messages for ``--seconds``; the master's runtime info is sampled every 100 ms
for the slave's lag. Replication MB/s is the bytes the slave holds at the end over the run.

    python benchmarks/replication_bench.py [--producers 8] [--seconds 10] [--size 1024] [--json]
                                          [--profile-dir DIR]   # + Python calls per message
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from pymq.client import Message, Producer
from pymq.client.producer import SendStatus
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient

MODES = ("none", "ASYNC_MASTER", "SYNC_MASTER")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def profiled_calls(pid: int, profile_dir: str, messages: int) -> float:
    """Stop the broker's cProfile probe (SIGUSR2: it dumps) and answer its Python calls per message."""
    os.kill(pid, signal.SIGUSR2)
    path = Path(profile_dir) / f"{pid}-broker.prof"
    for _ in range(100):
        if path.exists() and path.stat().st_size:
            await asyncio.sleep(0.2)  # (the dump is written in one go; let it finish)
            return round(pstats.Stats(str(path)).total_calls / max(1, messages), 1)  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)
    raise RuntimeError(f"broker {pid} wrote no profile to {path} (is benchmarks/probes/cprofile on PYTHONPATH?)")


async def info(rpc: RpcClient, addr: str) -> dict[str, Any]:
    resp = await rpc.invoke_ok(addr, Command.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=5.0)
    out: dict[str, Any] = decode_body(resp.body)
    return out


async def load(ns: str, master: str, producers: int, seconds: float, size: int) -> dict[str, Any]:
    body = b"x" * size
    lat: list[float] = []
    not_ok = 0
    lags: list[int] = []
    async with RpcClient() as rpc:
        ext = {"topic": "bench", "readQueueNums": 8, "writeQueueNums": 8}
        await rpc.invoke_ok(master, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
        stop = time.monotonic() + seconds

        async def producer(n: int) -> None:
            nonlocal not_ok
            async with Producer(ns, f"bench-{n}") as p:
                for _ in range(50):  # warm up (routes, connections)
                    try:
                        await p.send(Message("bench", body))
                    except PymqError:
                        await asyncio.sleep(0.1)
                while time.monotonic() < stop:
                    t = time.perf_counter()
                    r = await p.send(Message("bench", body))
                    lat.append(time.perf_counter() - t)
                    if r.status != SendStatus.SEND_OK:
                        not_ok += 1

        async def sample() -> None:
            while time.monotonic() < stop:
                lags.append(int((await info(rpc, master)).get("replicationLagBytes", 0)))
                await asyncio.sleep(0.1)

        t0 = time.monotonic()
        await asyncio.gather(sample(), *(producer(n) for n in range(producers)))
        elapsed = time.monotonic() - t0
    lat.sort()
    pick = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 3) if lat else None  # noqa: E731
    return {
        "messages": len(lat),
        "msgs_per_s": round(len(lat) / elapsed, 1),
        "p50_ms": pick(0.5),
        "p99_ms": pick(0.99),
        "not_send_ok": not_ok,
        "max_lag_bytes": max(lags, default=0),
        "seconds": round(elapsed, 2),
    }


def run_mode(mode: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    procs: list[DaemonProcess] = []
    try:
        ns = namesrv_process(root).start()
        procs.append(ns)
        role = "ASYNC_MASTER" if mode == "none" else mode
        master = broker_process(root / "m", ns.address, "broker-a", "--role", role).start()
        procs.append(master)
        slave = None
        if mode != "none":
            env = {"PYMQ_MASTER_ADDR": master.address}
            slave = broker_process(root / "s", ns.address, "broker-a", "--broker-id", "1", "--role", "SLAVE", env=env)
            procs.append(slave.start())

        async def go() -> dict[str, Any]:
            if slave is not None:
                async with RpcClient() as rpc:
                    deadline = time.monotonic() + 30
                    while (await info(rpc, master.address)).get("inSyncSlaves") != 1:
                        assert time.monotonic() < deadline, "slave did not join"
                        await asyncio.sleep(0.05)
            before = {
                "master": cpu_seconds(master.pid),
                "slave": cpu_seconds(slave.pid) if slave else 0.0,
                "client": cpu_seconds(os.getpid()),  # (the producers: this process)
            }
            pids = {"master": master.pid, **({"slave": slave.pid} if slave else {})}
            profiling = bool(args.profile_dir)
            if profiling:  # benchmarks/probes/cprofile: profile the load only
                for pid in pids.values():
                    os.kill(pid, signal.SIGUSR1)
            result = await load(ns.address, master.address, args.producers, args.seconds, args.size)
            if profiling:
                for role, pid in pids.items():
                    result[f"{role}_calls_per_msg"] = await profiled_calls(pid, args.profile_dir, result["messages"])
            # CPU per message: on a shared machine, the figure that separates cost from contention.
            n = max(1, result["messages"])
            result["master_cpu_us_per_msg"] = round((cpu_seconds(master.pid) - before["master"]) / n * 1e6, 1)
            result["client_cpu_us_per_msg"] = round((cpu_seconds(os.getpid()) - before["client"]) / n * 1e6, 1)
            if slave is not None:
                result["slave_cpu_us_per_msg"] = round((cpu_seconds(slave.pid) - before["slave"]) / n * 1e6, 1)
            if slave is not None:
                async with RpcClient() as rpc:
                    held = int((await info(rpc, slave.address))["commitLogMaxOffset"])
                result["replication_mb_per_s"] = round(held / 1e6 / result["seconds"], 2)
            return result

        return {"mode": mode, **asyncio.run(go())}
    finally:
        for p in reversed(procs):
            p.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--profile-dir",
        help="count the brokers' Python calls per message over the load (cProfile probe; CPU figures then "
        "include its overhead)",
    )
    args = ap.parse_args()
    if args.profile_dir:
        probe = str(Path(__file__).resolve().parent / "probes" / "cprofile")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [probe, os.environ.get("PYTHONPATH")]))
        os.environ.update(PROFILE_DIR=args.profile_dir, PROFILE_SIGNALS="1")
    results = []
    with tempfile.TemporaryDirectory(prefix="pymq-repl-bench-") as tmp:
        for mode in MODES:
            results.append(run_mode(mode, args, Path(tmp) / mode))
    base = results[0]["msgs_per_s"] or 1.0
    for r in results:
        r["vs_no_slave"] = round(r["msgs_per_s"] / base, 3)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(r)


if __name__ == "__main__":
    main()
