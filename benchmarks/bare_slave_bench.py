"""What SYNC_MASTER costs pymq's master alone: a real master, a bare slave that stores nothing.

    python benchmarks/bare_slave_bench.py [--seconds 4] [--rounds 2] [--producers 8] [--json]

``replication_bench.py`` charges the slave's work to the whole machine (client, master and slave
share 2 cores). Here the slave is a bare asyncio process (uvloop) that joins over the HA link,
decodes the DATA frames and ACKs the end of each read at once: no commitlog, no dispatch, no
per-message work. So what the master spends beyond its no-slave cost is its own replication
work: the frames it pushes, the ACKs it reads, the sends that wait and their deferred answers.

For each mode (``none``: an ASYNC_MASTER no slave joined, ``async``: ASYNC_MASTER with the bare
slave, ``sync``: SYNC_MASTER with the bare slave), in turns ``--rounds`` times, ``--producers``
producers send 1 KiB messages for ``--seconds`` (``replication_bench.load``); prints the rate,
the CPU per message of the master, of the producers' process and of the bare slave, and the
master's sleeps (voluntary context switches) per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replication_bench import cpu_seconds, info, load

from pymq.broker.ha import codec
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient


class BareSlave(asyncio.Protocol):
    """Joins holding nothing, then ACKs the end of what each read brought (stores nothing)."""

    def __init__(self, ended: asyncio.Future[None]) -> None:
        self.decoder = codec.FrameDecoder()
        self.held: int | None = None
        self.transport: asyncio.Transport | None = None
        self.ended = ended

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(codec.encode_hello(codec.Hello(0, 1, [], "127.0.0.1:1")))

    def data_received(self, data: bytes) -> None:
        for kind, body in self.decoder.feed(data):
            if kind == codec.JOIN:
                self.held = codec.decode_join(body).offset
            elif kind == codec.DATA:
                offset, _master_max, _flags, piece = codec.decode_data(body)
                self.held = offset + len(piece)
        if self.held is not None and self.transport is not None:
            self.transport.write(codec.encode_ack(self.held))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


def run_slave(ha: str) -> None:
    """The bare slave's process: connect to the master's HA address and ACK until the link ends."""

    async def main() -> None:
        host, _, port = ha.rpartition(":")
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await asyncio.get_running_loop().create_connection(lambda: BareSlave(ended), host, int(port))
        await ended

    uvloop.run(main())


def voluntary_switches(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                total += int(line.split()[1])
    return total


class Setup:
    """One mode's nameserver, master and (but for ``none``) bare slave process."""

    def __init__(self, mode: str, root: Path) -> None:
        self.mode = mode
        self.ns = namesrv_process(root).start()
        role = "SYNC_MASTER" if mode == "sync" else "ASYNC_MASTER"
        self.master: DaemonProcess = broker_process(root / "m", self.ns.address, "broker-a", "--role", role).start()
        self.slave: Any = None

    async def join(self) -> None:
        if self.mode == "none":
            return
        import multiprocessing

        async with RpcClient() as rpc:
            ha = str((await info(rpc, self.master.address))["haAddress"])
            self.slave = multiprocessing.get_context("spawn").Process(target=run_slave, args=(ha,), daemon=True)
            self.slave.start()
            for _ in range(600):
                if (await info(rpc, self.master.address)).get("inSyncSlaves") == 1:
                    return
                await asyncio.sleep(0.05)
        raise RuntimeError("the bare slave did not join")

    async def measure(self, args: argparse.Namespace) -> dict[str, float]:
        pids = {"master": self.master.pid, "client": os.getpid()}
        if self.slave is not None:
            pids["slave"] = self.slave.pid
        spent: dict[str, float] = {}

        def window(start: bool) -> None:
            sign = -1 if start else 1
            for role, pid in pids.items():
                spent[role] = spent.get(role, 0.0) + sign * cpu_seconds(pid)
            spent["sleeps"] = spent.get("sleeps", 0.0) + sign * voluntary_switches(self.master.pid)

        r = await load(self.ns.address, self.master.address, args.producers, args.seconds, 1024, window)
        if self.slave is not None and not self.slave.is_alive():
            raise RuntimeError(f"the bare slave exited ({self.slave.exitcode}) during the load")
        if r["not_send_ok"]:
            raise RuntimeError(f"{r['not_send_ok']} sends not SEND_OK in mode {self.mode} (slave out of sync?)")
        n = max(1, r["messages"])
        out = {"msgs_per_s": r["msgs_per_s"], "master_sleeps_per_msg": round(spent.pop("sleeps") / n, 2)}
        out.update({f"{role}_cpu_us_per_msg": round(s / n * 1e6, 1) for role, s in spent.items()})
        return out

    def stop(self) -> None:
        if self.slave is not None:
            self.slave.kill()
            self.slave.join(5)
        self.master.stop()
        self.ns.stop()


async def main(args: argparse.Namespace, root: Path) -> dict[str, dict[str, float]]:
    setups = [Setup(mode, root / mode) for mode in ("none", "async", "sync")]
    try:
        for s in setups:
            await s.join()
        runs: dict[str, list[dict[str, float]]] = {s.mode: [] for s in setups}
        for _ in range(args.rounds):
            for s in setups:
                runs[s.mode].append(await s.measure(args))
    finally:
        for s in setups:
            s.stop()
    return {mode: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]} for mode, rs in runs.items()}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pymq-bare-slave-") as tmp:
        result = uvloop.run(main(ns, Path(tmp)))
    if ns.json:
        print(json.dumps(result))
    else:
        none_rate = result["none"]["msgs_per_s"]
        for mode, r in result.items():
            print(
                f"{mode:6} {r['msgs_per_s']:9.1f} msgs/s ({r['msgs_per_s'] / none_rate:.2f} of none)  "
                + "  ".join(f"{k} {v}" for k, v in r.items() if k != "msgs_per_s")
            )
