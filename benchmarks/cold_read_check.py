"""Cold backlog reads in process, against a hot read of the same backlog (issue 19).

Writes ``--mb`` of 1 KiB messages to one queue, shuts the store down, drops the commitlog's
pages from the page cache (``posix_fadvise(DONTNEED)`` on its own files only: no global
cache drop, so no privilege needed and no other process disturbed), restarts and reads the
queue through on an asyncio loop like the broker's pull handler (pulls of 32 messages, each
slice copied as the transport would), cold and then hot, while a ticker task measures the
loop's lateness. A pull whose pages are not all in memory (``MessageStore.pages_missing``)
has them brought in on a worker thread first (``MessageStore.prefault``), as the pull handler
does; ``--no-offload`` copies on the loop regardless (what the loop did before).

Reports per pass: seconds and MB/s; ``busy`` — the loop's own time in the reads and copies
(what a stall costs everyone else on it), and its p99/max per pull; its major/minor page faults (the loop thread's
only); the ticker's lateness p99/max; and the ratios cold/hot. ``--pace MB/s`` holds the reader
to a rate (a consumer limited by its network or its own work).

Before any of this (synchronous reads, unpaced): cold 1.3-2.0 GB/s, hot 3.2-3.6 GB/s, 4-5 major
faults per cold pass (the kernel's own read-ahead of mapped files, 8 MiB on this disk, serves
the sequential faults). ``madvise(MADV_WILLNEED)`` of the 4 MiB after each cold pull did not
move the cold figure, nor did a read-ahead thread mapping 16 MiB ahead of each cold reader
(figures in docs/STORE.md).

    python benchmarks/cold_read_check.py [--mb 256] [--pace 300] [--no-offload] [--dir /tmp/pymq-cold] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from pymq.broker.store import MessageStore
from pymq.config import StoreConfig
from pymq.protocol.record import encode_record, pack_host


def config(root: Path) -> StoreConfig:
    return StoreConfig(store_dir=root, commitlog_file_size=64 << 20, cleanup_interval_ms=3_600_000)


def drop_cache(root: Path) -> None:
    for p in sorted((root / "commitlog").iterdir()):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


async def read_through(store: MessageStore, count: int, pace: float, offload: bool) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    late: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t = loop.time()
            await asyncio.sleep(0.001)
            late.append(loop.time() - t - 0.001)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = resource.getrusage(resource.RUSAGE_THREAD)
    busy = 0.0
    pulls: list[float] = []  # the loop's own time per pull
    offloaded = 0
    behind: list[asyncio.Future[Any]] = []  # the read-behind prefaults: awaited at the end, so their errors show
    t0 = time.perf_counter()
    offset = total = 0
    while offset < count:
        p0 = time.perf_counter()
        got = store.get_messages("g", "Cold", 0, offset, 32)
        own = 0.0
        if offload and store.pages_missing(got):
            own = time.perf_counter() - p0
            offloaded += 1
            await loop.run_in_executor(None, store.prefault, got)
            behind.append(loop.run_in_executor(None, store.prefault_after, got))  # as the pull handler does
            p0 = time.perf_counter()
        for view in got.buffers:
            total += len(bytes(view))  # the copy a socket write makes
        offset = got.next_begin_offset
        done = time.perf_counter()
        own += done - p0
        busy += own
        pulls.append(own)
        wait = t0 + total / (pace * 1e6) - done if pace else 0.0
        await asyncio.sleep(max(0.0, wait))  # (0: one loop turn, so the ticker runs between pulls)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_THREAD)
    stop = True
    await tick
    await asyncio.gather(*behind)
    late.sort()
    pulls.sort()
    return {
        "seconds": round(seconds, 3),
        "mb_per_s": round(total / 1e6 / seconds, 1),
        "busy_seconds": round(busy, 3),
        "busy_mb_per_s": round(total / 1e6 / busy, 1),
        "pull_p99_us": round(pulls[int(len(pulls) * 0.99)] * 1e6),
        "pull_max_us": round(pulls[-1] * 1e6),
        "pulls_offloaded": offloaded,
        "loop_late_p99_us": round(late[int(len(late) * 0.99)] * 1e6) if late else None,
        "loop_late_max_us": round(late[-1] * 1e6) if late else None,
        "major_faults": after.ru_majflt - before.ru_majflt,
        "minor_faults": after.ru_minflt - before.ru_minflt,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--pace", type=float, default=0.0, help="MB/s the reader is limited to (0: unpaced)")
    ap.add_argument("--no-offload", action="store_true", help="copy cold pages on the loop (the A/B)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/pymq-cold"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = args.dir / "store"
    shutil.rmtree(args.dir, ignore_errors=True)
    offload = not args.no_offload and hasattr(MessageStore, "pages_missing")  # (older trees: no offload)
    out: dict[str, Any] = {"mb": args.mb, "pace_mb_s": args.pace, "offload": offload}
    try:
        store = MessageStore(config(root))
        store.start()
        batch = b"".join(
            encode_record(b"Cold", os.urandom(1024), b"", born_host=pack_host("10.0.0.1", 1)) for _ in range(64)
        )
        count = 0
        while count * 1100 < args.mb << 20:
            store.put("Cold", 0, batch)
            count += 64
        store.shutdown()
        drop_cache(root)
        store = MessageStore(config(root))
        store.start()
        out["cold"] = asyncio.run(read_through(store, count, args.pace, offload))
        out["hot"] = asyncio.run(read_through(store, count, args.pace, offload))
        out["cold_vs_hot"] = round(out["cold"]["mb_per_s"] / out["hot"]["mb_per_s"], 2)
        out["busy_cold_vs_hot"] = round(out["cold"]["busy_mb_per_s"] / out["hot"]["busy_mb_per_s"], 2)
        store.shutdown()
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
