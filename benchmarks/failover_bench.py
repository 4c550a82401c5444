"""Automatic failover (issue 32): kill -9 a SYNC_MASTER under SYNC producers, N times, on real processes.

    python benchmarks/failover_bench.py [--kills 5] [--producers 4] [--timeout 3.0] [--lease 2.0]
                                         [--heartbeat 0.5] [--json]

Each round starts a nameserver with ``--controller embedded``, a SYNC_MASTER and its slave in
``--controller-mode`` (fresh stores), waits for the slave to be in the sync-state set, runs
``--producers`` concurrent SYNC senders, kills the master with SIGKILL once 200 messages are
acknowledged, and keeps sending until each producer has had 20 answers from the new master.
Per round: the time from the kill to the first answered send on the new master, acknowledged
messages missing afterwards (read back from the new master; must be 0), duplicates read, and
the sends answered per second in the window from the kill to the 20th answer of each producer.
Defaults are the daemons' defaults (election after 3 s, lease 2 s, heartbeat 0.5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer
from pymq.client.send_result import SendStatus
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.route import MessageQueue
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient

TOPIC = "failover-bench"
QUEUES = 4


async def status(ns: str) -> dict[str, Any]:
    async with RpcClient() as rpc:
        resp = await rpc.invoke_ok(ns, Command.request(RequestCode.CONTROLLER_STATUS), timeout=3.0)
    group: dict[str, Any] = decode_body(resp.body)["groups"].get("broker-a") or {}
    return group


async def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def one_round(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {"PYMQ_CONTROLLER_HEARTBEAT_SECONDS": str(args.heartbeat), "PYMQ_SLAVE_SYNC_INTERVAL_SECONDS": "1"}
    procs: list[DaemonProcess] = []
    try:
        ns = namesrv_process(work, "--controller", "embedded", "--controller-dir", str(work / "ctl"),
                             "--controller-master-timeout", str(args.timeout),
                             "--controller-lease", str(args.lease)).start()  # fmt: skip
        procs.append(ns)
        master = broker_process(work / "m", ns.address, "broker-a", "--role", "SYNC_MASTER",
                                "--controller-mode", env=env).start()  # fmt: skip
        procs.append(master)
        async with RpcClient() as rpc:
            ext = {"topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
            await rpc.invoke_ok(master.address, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
        slave = broker_process(work / "s", ns.address, "broker-a", "--role", "SLAVE", "--broker-id", "1",
                               "--controller-mode", env=env).start()  # fmt: skip
        procs.append(slave)

        async def in_sync() -> bool:
            return slave.address in (await status(ns.address)).get("syncSet", [])

        await wait_for(in_sync, 20, "slave in sync")
        acked: set[bytes] = set()
        answered_after: Counter[int] = Counter()
        killed: list[float] = []
        first_after: list[float] = []
        done = asyncio.Event()
        opts = {"poll_namesrv_interval_seconds": 0.5}

        async def producer(p: int) -> None:
            async with Producer(ns.address, f"bench-{p}", instance_name=f"b{p}", **opts) as prod:
                i = 0
                while not done.is_set():
                    body = f"{p}-{i}".encode()
                    i += 1
                    try:
                        r = await prod.send(Message(TOPIC, body), timeout=2.0)
                    except PymqError:
                        await asyncio.sleep(0.02)
                        continue
                    if r.status is SendStatus.SEND_OK:
                        acked.add(body)
                    if killed and r.store_addr == slave.address:
                        acked.add(body)  # stored by the new master (alone in its set: SLAVE_NOT_AVAILABLE)
                        if not first_after:
                            first_after.append(time.monotonic())
                        answered_after[p] += 1
                        if len(answered_after) == args.producers and min(answered_after.values()) >= 20:
                            done.set()
                    if not killed and len(acked) >= 200:
                        master.kill()
                        killed.append(time.monotonic())

        tasks = [asyncio.create_task(producer(p)) for p in range(args.producers)]
        await asyncio.wait_for(done.wait(), 60)
        end = time.monotonic()
        await asyncio.gather(*tasks)
        pc = PullConsumer(ns.address, "reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        pc.assign([MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)])
        read: Counter[bytes] = Counter()
        deadline = time.monotonic() + 15
        async with pc:
            while not acked <= set(read) and time.monotonic() < deadline:
                read.update(m.body for m in await pc.poll(timeout=0.5))
        return {
            "failover_s": round(first_after[0] - killed[0], 3),
            "acked": len(acked),
            "lost": len(acked - set(read)),
            "duplicates": sum(c - 1 for c in read.values() if c > 1),
            "window_sends_per_s": round(sum(answered_after.values()) / (end - killed[0]), 1),
        }
    finally:
        for p in reversed(procs):
            p.stop()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--lease", type=float, default=2.0)
    ap.add_argument("--heartbeat", type=float, default=0.5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rounds = []
    for k in range(args.kills):
        with tempfile.TemporaryDirectory(prefix="failover-bench-") as tmp:
            r = await one_round(Path(tmp), args)
        rounds.append(r)
        if not args.json:
            print(f"kill {k + 1}: {r}")
    times = [r["failover_s"] for r in rounds]
    summary = {
        "kills": len(rounds),
        "failover_p50_s": statistics.median(times),
        "failover_max_s": max(times),
        "lost_total": sum(r["lost"] for r in rounds),
        "duplicates_total": sum(r["duplicates"] for r in rounds),
        "window_sends_per_s_median": statistics.median(r["window_sends_per_s"] for r in rounds),
    }
    print(json.dumps({"rounds": rounds, "summary": summary} if args.json else summary))


if __name__ == "__main__":
    asyncio.run(main())
