"""Produce throughput and latency of one broker group with no slave, an ASYNC_MASTER slave and a
SYNC_MASTER slave, measured in the same run (the ratios are the figure), plus the slave's lag.

Every mode has its own nameserver, master and slave as real processes (small store files
under a temporary directory), all started first. Then each mode in turn gets ``--seconds`` of
load (``--producers`` asyncio producers sending ``--size``-byte messages to a topic), and that
``--slices`` times: the modes share the machine's busy and quiet moments, so their ratio
swings less than when each ran once, one after the other. A mode's figures sum its slices;
``vs_no_slave_per_slice`` shows the ratio slice by slice. The master's runtime info is
sampled every 100 ms for the slave's lag; replication MB/s is the bytes the slave holds at the
end over the mode's loaded seconds.

    python benchmarks/replication_bench.py [--producers 8] [--seconds 10] [--slices 1] [--size 1024]
                                          [--json] [--profile-dir DIR]   # + Python calls per message
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
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
    """The broker's Python calls per message, from the dump its cProfile probe wrote on SIGUSR2."""
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


async def load(
    ns: str, master: str, producers: int, seconds: float, size: int, window: Callable[[bool], None]
) -> dict[str, Any]:
    """``producers`` send for ``seconds`` once all of them warmed up; ``window(True)`` is called as
    the measured seconds start and ``window(False)`` as they end (the producers' start, warm-up
    and close are outside them)."""
    body = b"x" * size
    lat: list[float] = []
    not_ok = 0
    lags: list[int] = []
    warm = 0
    running = 0
    go, ended = asyncio.Event(), asyncio.Event()
    stop = 0.0
    async with RpcClient() as rpc:
        ext = {"topic": "bench", "readQueueNums": 8, "writeQueueNums": 8}
        await rpc.invoke_ok(master, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))

        async def producer(n: int) -> None:
            nonlocal not_ok, warm, running
            async with Producer(ns, f"bench-{n}") as p:
                for _ in range(50):  # warm up (routes, connections)
                    try:
                        await p.send(Message("bench", body))
                    except PymqError:
                        await asyncio.sleep(0.1)
                warm += 1
                await go.wait()
                running += 1
                while time.monotonic() < stop:
                    t = time.perf_counter()
                    r = await p.send(Message("bench", body))
                    lat.append(time.perf_counter() - t)
                    if r.status != SendStatus.SEND_OK:
                        not_ok += 1
                running -= 1
                if not running:
                    ended.set()
                await go_close.wait()

        async def sample() -> None:
            await go.wait()
            while time.monotonic() < stop:
                lags.append(int((await info(rpc, master)).get("replicationLagBytes", 0)))
                await asyncio.sleep(0.1)

        go_close = asyncio.Event()
        tasks = [asyncio.ensure_future(sample()), *(asyncio.ensure_future(producer(n)) for n in range(producers))]
        while warm < producers:
            await asyncio.sleep(0.01)
        window(True)
        t0 = time.monotonic()
        stop = t0 + seconds
        go.set()
        await ended.wait()
        elapsed = time.monotonic() - t0
        window(False)
        go_close.set()
        await asyncio.gather(*tasks)
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


class Setup:
    """One mode's processes (nameserver, master, slave if any), started once and loaded in turns."""

    def __init__(self, mode: str, root: Path) -> None:
        self.mode = mode
        self.procs: list[DaemonProcess] = []
        ns = namesrv_process(root).start()
        self.procs.append(ns)
        self.ns = ns
        role = "ASYNC_MASTER" if mode == "none" else mode
        self.master = broker_process(root / "m", ns.address, "broker-a", "--role", role).start()
        self.procs.append(self.master)
        self.slave: DaemonProcess | None = None
        if mode != "none":
            env = {"PYMQ_MASTER_ADDR": self.master.address}
            slave = broker_process(root / "s", ns.address, "broker-a", "--broker-id", "1", "--role", "SLAVE", env=env)
            self.slave = slave.start()
            self.procs.append(self.slave)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()

    async def joined(self) -> None:
        if self.slave is None:
            return
        async with RpcClient() as rpc:
            deadline = time.monotonic() + 30
            while (await info(rpc, self.master.address)).get("inSyncSlaves") != 1:
                assert time.monotonic() < deadline, "slave did not join"
                await asyncio.sleep(0.05)

    async def measure(self, args: argparse.Namespace) -> dict[str, Any]:
        """One load slice of ``args.seconds``, with the CPU each process spent on it."""
        master, slave = self.master, self.slave
        pids = {"master": master.pid, **({"slave": slave.pid} if slave else {})}
        profiling = bool(args.profile_dir)
        cpu: dict[str, float] = {}

        def window(start: bool) -> None:
            sign = -1 if start else 1
            for role, pid in (*pids.items(), ("client", os.getpid())):  # (the producers: this process)
                cpu[role] = cpu.get(role, 0.0) + sign * cpu_seconds(pid)
            if profiling:  # benchmarks/probes/cprofile: profile the measured seconds only
                for pid in pids.values():
                    os.kill(pid, signal.SIGUSR1 if start else signal.SIGUSR2)

        result = await load(self.ns.address, master.address, args.producers, args.seconds, args.size, window)
        if profiling:
            for role, pid in pids.items():
                result[f"{role}_calls_per_msg"] = await profiled_calls(pid, args.profile_dir, result["messages"])
        # CPU per message: on a shared machine, the figure that separates cost from contention.
        for role, seconds in cpu.items():
            result[f"{role}_cpu_s"] = seconds
        return result

    async def held_by_slave(self) -> int:
        assert self.slave is not None
        async with RpcClient() as rpc:
            return int((await info(rpc, self.slave.address))["commitLogMaxOffset"])


def summarise(mode: str, slices: list[dict[str, Any]], held: int | None) -> dict[str, Any]:
    """One mode's slices as one result: rate over all of them, p50/p99 the slices' medians, CPU per message."""
    messages = sum(s["messages"] for s in slices)
    seconds = sum(s["seconds"] for s in slices)
    n = max(1, messages)
    out: dict[str, Any] = {
        "mode": mode,
        "messages": messages,
        "msgs_per_s": round(messages / seconds, 1) if seconds else 0.0,
        "p50_ms": round(statistics.median(s["p50_ms"] for s in slices if s["p50_ms"] is not None), 3),
        "p99_ms": round(statistics.median(s["p99_ms"] for s in slices if s["p99_ms"] is not None), 3),
        "not_send_ok": sum(s["not_send_ok"] for s in slices),
        "max_lag_bytes": max(s["max_lag_bytes"] for s in slices),
        "seconds": round(seconds, 2),
        "slices": len(slices),
    }
    for key in ("master_calls_per_msg", "slave_calls_per_msg"):
        if key in slices[0]:
            out[key] = round(statistics.mean(s[key] for s in slices), 1)
    for role in ("master", "client", "slave"):
        if f"{role}_cpu_s" in slices[0]:
            out[f"{role}_cpu_us_per_msg"] = round(sum(s[f"{role}_cpu_s"] for s in slices) / n * 1e6, 1)
    if held is not None:
        out["replication_mb_per_s"] = round(held / 1e6 / seconds, 2) if seconds else 0.0
    return out


def run(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """Start every mode's processes, then load them in turns (``--slices`` rounds of ``--seconds``
    each: a busy minute on a shared machine falls on every mode alike), and sum each mode's slices."""
    setups: list[Setup] = []
    try:
        for mode in MODES:
            setups.append(Setup(mode, root / mode))

        async def go() -> list[dict[str, Any]]:
            for setup in setups:
                await setup.joined()
            slices: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            for _ in range(args.slices):
                for setup in setups:
                    slices[setup.mode].append(await setup.measure(args))
            results = []
            for setup in setups:
                held = await setup.held_by_slave() if setup.slave is not None else None
                results.append(summarise(setup.mode, slices[setup.mode], held))
            # the same ratio slice by slice: how much it swings
            for r in results:
                r["vs_no_slave_per_slice"] = [
                    round(a["messages"] / a["seconds"] / (b["messages"] / b["seconds"]), 3)
                    for a, b in zip(slices[r["mode"]], slices["none"], strict=True)
                ]
            return results

        return asyncio.run(go())
    finally:
        for setup in reversed(setups):
            setup.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of load per mode and slice")
    ap.add_argument(
        "--slices", type=int, default=1, help="load the modes in turns this many times (figures: all slices summed)"
    )
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--profile-dir",
        help="count the brokers' Python calls per message over the load (cProfile probe; CPU figures then "
        "include its overhead)",
    )
    args = ap.parse_args()
    if args.profile_dir and args.slices != 1:
        ap.error("--profile-dir takes one slice (each dump would overwrite the last)")
    if args.profile_dir:
        probe = str(Path(__file__).resolve().parent / "probes" / "cprofile")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [probe, os.environ.get("PYTHONPATH")]))
        os.environ.update(PROFILE_DIR=args.profile_dir, PROFILE_SIGNALS="1")
    with tempfile.TemporaryDirectory(prefix="pymq-repl-bench-") as tmp:
        results = run(args, Path(tmp))
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
