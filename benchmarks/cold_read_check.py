"""Cold backlog reads in process, against a hot read of the same backlog (issue 19).

Writes ``--mb`` of 1 KiB messages to one queue, shuts the store down, drops the commitlog's
pages from the page cache (``posix_fadvise(DONTNEED)`` on its own files only: no global
cache drop, so no root needed), restarts and reads the queue through like a consumer (pulls
of 32 messages, each slice copied as the transport would), cold and then hot. Reports per
pass: seconds and MB/s; the reading thread's own time (``busy``: what the event loop would
spend, the rest being the pacing sleeps), its p99/max per pull, and its major/minor page
faults; and the ratios cold/hot of MB/s and of busy MB/s.

``--pace MB/s`` holds the reader to a rate (a consumer limited by its network or its own
work), which is when the store's read-ahead thread (``pymq/broker/store/read_ahead.py``) can
get ahead; ``--no-read-ahead`` stops that thread for an A/B in the same tree.

Before the read-ahead thread (unpaced): cold 1.3-2.0 GB/s, hot 3.2-3.6 GB/s, 4-5 major
faults per cold pass (the kernel's own read-ahead of mapped files, 8 MiB on this disk,
serves the sequential faults). ``madvise(MADV_WILLNEED)`` of the 4 MiB after each cold pull
did not move the cold figure (1.2-1.8 GB/s). Figures with the read-ahead: ``docs/STORE.md``.

    python benchmarks/cold_read_check.py [--mb 256] [--pace 300] [--no-read-ahead] [--dir /tmp/pymq-cold] [--json]
"""

from __future__ import annotations

import argparse
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


def read_through(store: MessageStore, count: int, pace: float) -> dict[str, Any]:
    """Pull the queue through; ``pace`` (MB/s, 0: as fast as possible) spaces the pulls like a
    consumer limited elsewhere, the loop idle in between (when a read-ahead thread can work)."""
    before = resource.getrusage(resource.RUSAGE_THREAD)
    pulls: list[float] = []
    t0 = time.perf_counter()
    offset = total = 0
    while offset < count:
        p0 = time.perf_counter()
        got = store.get_messages("g", "Cold", 0, offset, 32)
        for view in got.buffers:
            total += len(bytes(view))  # the copy a socket write makes
        offset = got.next_begin_offset
        done = time.perf_counter()
        pulls.append(done - p0)
        if pace:
            wait = t0 + total / (pace * 1e6) - done
            if wait > 0:
                time.sleep(wait)
    seconds = time.perf_counter() - t0
    busy = sum(pulls)
    pulls.sort()
    return {
        "seconds": round(seconds, 3),
        "mb_per_s": round(total / 1e6 / seconds, 1),
        # the reading thread's (the event loop's) own time: what a stall costs everything else
        "busy_seconds": round(busy, 3),
        "busy_mb_per_s": round(total / 1e6 / busy, 1),
        "pull_p99_us": round(pulls[int(len(pulls) * 0.99)] * 1e6),
        "pull_max_us": round(pulls[-1] * 1e6),
        "major_faults": resource.getrusage(resource.RUSAGE_THREAD).ru_majflt - before.ru_majflt,
        "minor_faults": resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before.ru_minflt,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/pymq-cold"))
    ap.add_argument("--pace", type=float, default=0.0, help="MB/s the reader is limited to (0: unpaced)")
    ap.add_argument("--no-read-ahead", action="store_true", help="stop the store's read-ahead thread (A/B)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = args.dir / "store"
    shutil.rmtree(args.dir, ignore_errors=True)
    out: dict[str, Any] = {"mb": args.mb, "pace_mb_s": args.pace}
    try:
        store = MessageStore(config(root))
        store.start()
        batch = b"".join(
            encode_record(b"Cold", os.urandom(1024), b"", born_host=pack_host("10.0.0.1", 1)) for _ in range(64)
        )
        count = 0
        while count * 1100 < args.mb << 20:
            store.put_messages("Cold", 0, batch)
            count += 64
        store.shutdown()
        drop_cache(root)
        store = MessageStore(config(root))
        store.start()
        ra = getattr(store, "read_ahead", None)  # (older trees have none)
        if args.no_read_ahead and ra is not None:
            ra.stop()
            store.read_ahead = None
        out["read_ahead"] = getattr(store, "read_ahead", None) is not None
        out["cold"] = read_through(store, count, args.pace)
        out["hot"] = read_through(store, count, args.pace)
        out["cold_vs_hot"] = round(out["cold"]["mb_per_s"] / out["hot"]["mb_per_s"], 2)
        out["busy_cold_vs_hot"] = round(out["cold"]["busy_mb_per_s"] / out["hot"]["busy_mb_per_s"], 2)
        store.shutdown()
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
