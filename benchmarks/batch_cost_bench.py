"""W1's broker side in process: one SEND_BATCH_MESSAGE frame of 64 records of 1 KiB in -> its answer out.

    python benchmarks/batch_cost_bench.py [--records 64] [--body-size 1024] [--rounds 5] [--profile]

A real BrokerApp and server Connection with a recording transport (no sockets): frame decode,
dispatch, typed header, topic checks, put hooks, split + CRC check, commitlog copy, consume-queue
and index entries, stats, the answer's encoding. µs per batch (best of ``--rounds`` rounds of
1,000 batches) by the wall clock and by the process's CPU clock (the latter includes the store's
threads: the warmer prefaulting commitlog pages). ``--profile`` prints a cProfile of 2,000 more.
The store lives in a temporary directory that is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from pymq.broker.app import BrokerApp
from pymq.client import broker_api
from pymq.config import BrokerConfig
from pymq.logs import configure_logging
from pymq.protocol.frame import encode_bytes
from pymq.protocol.record import encode_record, pack_host
from pymq.protocol.route import TopicConfig
from pymq.transport.codec import default_codec
from pymq.transport.connection import Connection
from pymq.transport.limits import ConnectionLimits


class RecordingTransport:
    def __init__(self) -> None:
        self.writes = 0

    def writelines(self, bufs: Any) -> None:
        self.writes += 1

    def write(self, b: Any) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, k: str, d: Any = None) -> Any:
        return None

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="pymq-batch-bench-"))
    app = BrokerApp(BrokerConfig.model_validate({"port": 0, "store": {"store_dir": str(root / "broker")}}))
    await app.start()
    try:
        app.topics.upsert(TopicConfig("bench", 8, 8))
        host = pack_host("127.0.0.1", 0)
        data = b"".join(
            encode_record(
                b"bench",
                os.urandom(args.body_size),
                b"UNIQ_KEY\x010A0000010B1A18B4AAC200D2F1A3%04X\x02" % i,
                born_timestamp=1_764_000_000_000,
                born_host=host,
            )
            for i in range(args.records)
        )
        conn = Connection(app.dispatcher, default_codec(16 << 20), server_side=True, limits=ConnectionLimits())
        transport = RecordingTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        frames = []
        for i in range(8):
            cmd = broker_api.send_message("bench", i, "bench-group", data, batch=True)
            cmd.opaque = i + 1
            frames.append(encode_bytes(cmd))

        async def run(n: int) -> None:
            for i in range(n):
                conn.data_received(frames[i & 7])
                if i % 16 == 0:
                    await asyncio.sleep(0)  # let the loop run what the answers scheduled

        await run(500)
        wall = cpu = float("inf")
        for _ in range(args.rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            await run(1000)
            wall = min(wall, (time.perf_counter() - t0) / 1000 * 1e6)
            cpu = min(cpu, (time.process_time() - c0) / 1000 * 1e6)
        print(f"batch of {args.records} x {args.body_size} B: wall {wall:.1f} us, process CPU {cpu:.1f} us per batch")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            await run(2000)
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    finally:
        await app.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    configure_logging("error")
    uvloop.run(main(ap.parse_args()))
