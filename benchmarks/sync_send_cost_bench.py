"""The loop's CPU per single send under ASYNC_FLUSH and SYNC_FLUSH, in process, and the commitlog pwrite's wall time.

    python benchmarks/sync_send_cost_bench.py [--store-set KEY=VALUE ...]

A real BrokerApp with 8 server-side Connections on a recording transport (``tests.helpers``).
A round feeds one SEND_MESSAGE frame to each connection, then gives the loop 4 turns (the
group commit's kick and answers run there). Under SYNC_FLUSH the group commit's flush request
is answered at once on the loop (no disk sync): what is measured is the loop's own work per
send, put path, waiters and answers, in µs of the loop thread's CPU (best of 5 rounds of
1,000). It also times every ``pwrite`` of the commitlog (SYNC_FLUSH writes records with it),
wall clock: p50, p90, p99, max and mean, which shows when the loop's write waits for another
thread (the warmer's prefault holds the file's inode lock while it writes).
``--store-set`` passes [store] settings, e.g. ``sync_flush_write_ahead=false``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (tests.helpers from the repo)

import uvloop

import pymq.broker.store.commitlog as commitlog_module
from pymq.broker.app import BrokerApp
from pymq.client import broker_api
from pymq.config import BrokerConfig
from pymq.logs import configure_logging
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import encode_bytes
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.route import TopicConfig
from pymq.transport.codec import default_codec
from pymq.transport.connection import Connection
from pymq.transport.limits import ConnectionLimits
from tests.helpers import RecordingTransport

PRODUCERS = 8


class _TimedOs:
    """``os`` for the commitlog module, with its ``pwrite`` timed."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def pwrite(self, fd: int, data: Any, at: int) -> int:
        t = time.perf_counter()
        n = os.pwrite(fd, data, at)
        self.times.append(time.perf_counter() - t)
        return n


async def measure(flush: str, store_set: dict[str, Any]) -> tuple[float, list[float]]:
    root = Path(tempfile.mkdtemp(prefix="pymq-sync-cost-"))
    store = {"store_dir": str(root / "broker"), "flush_disk_type": flush, **store_set}
    app = BrokerApp(BrokerConfig.model_validate({"port": 0, "store": store}))
    timed = _TimedOs()
    commitlog_module.os = timed  # type: ignore[assignment]
    await app.start()
    loop = asyncio.get_running_loop()
    try:
        app.topics.upsert(TopicConfig("bench", PRODUCERS, PRODUCERS))
        sends = app.dispatcher._handlers[int(RequestCode.SEND_MESSAGE)].__self__  # type: ignore[attr-defined]
        if sends.group_commit is not None:  # answered on the loop at once: no disk sync
            sends.group_commit._request_flush = lambda _offset, done: loop.call_soon(done, True)
        record = encode_record(b"bench", os.urandom(1024), encode_properties({"UNIQ_KEY": "A" * 32}))
        conns, frames = [], []
        for i in range(PRODUCERS):
            conn = Connection(app.dispatcher, default_codec(16 << 20), server_side=True, limits=ConnectionLimits())
            conn.connection_made(RecordingTransport())  # type: ignore[arg-type]
            conns.append(conn)
            cmd = broker_api.send_message("bench", i, "bench-group", record)
            cmd.opaque = i + 1
            frames.append(encode_bytes(cmd))

        async def rounds(n: int) -> None:
            for _ in range(n):
                for conn, frame in zip(conns, frames, strict=True):
                    conn.data_received(frame)
                for _ in range(4):
                    await asyncio.sleep(0)
                for conn in conns:
                    conn.transport.calls.clear()  # type: ignore[union-attr]

        await rounds(300)
        timed.times.clear()
        best = float("inf")
        for _ in range(5):
            t = time.thread_time()
            await rounds(1000)
            best = min(best, (time.thread_time() - t) / (1000 * PRODUCERS))
        return best * 1e6, timed.times
    finally:
        commitlog_module.os = os  # type: ignore[assignment]
        await app.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store-set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    store_set: dict[str, Any] = {}
    for item in args.store_set:
        key, _, value = item.partition("=")
        store_set[key] = value
    configure_logging("error")
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        us, writes = uvloop.run(measure(flush, store_set))
        line = f"{flush:12} {us:6.2f} us of loop CPU per send"
        if writes:
            w = sorted(writes)
            n = len(w)
            line += (
                f" | pwrite p50 {w[n // 2] * 1e6:.1f} p90 {w[int(n * 0.9)] * 1e6:.1f} "
                f"p99 {w[int(n * 0.99)] * 1e6:.1f} max {w[-1] * 1e6:.0f} mean {sum(w) / n * 1e6:.1f} us"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
