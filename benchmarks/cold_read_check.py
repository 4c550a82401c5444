"""Cold backlog reads in process, against a hot read of the same backlog (issue 19).

Writes ``--mb`` of 1 KiB messages to one queue, shuts the store down, drops the commitlog's
pages from the page cache (``posix_fadvise(DONTNEED)`` on its own files only: no global
cache drop), restarts and reads the queue through like a consumer (pulls of 32 messages,
each slice copied as the transport would). Reports seconds, MB/s and the major page faults
the reading thread took, cold and then hot, and their ratio.

Measured on the shared 2-core VM (256 MB): cold 1.3-2.0 GB/s, hot 3.2-3.6 GB/s, 4-5 major
faults per cold pass (the kernel's own read-ahead of mapped files serves the sequential
faults). An ``madvise(MADV_WILLNEED)`` of the 4 MiB after each cold pull, run by the warmer
thread, was tried and did not move the cold figure (1.2-1.8 GB/s in the same runs), so it
was not kept.

    python benchmarks/cold_read_check.py [--mb 256] [--dir /tmp/pymq-cold] [--json]
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


def read_through(store: MessageStore, count: int) -> dict[str, Any]:
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt
    t0 = time.perf_counter()
    offset = total = 0
    while offset < count:
        got = store.get_messages("g", "Cold", 0, offset, 32)
        for view in got.buffers:
            total += len(bytes(view))  # the copy a socket write makes
        offset = got.next_begin_offset
    seconds = time.perf_counter() - t0
    return {
        "seconds": round(seconds, 3),
        "mb_per_s": round(total / 1e6 / seconds, 1),
        "major_faults": resource.getrusage(resource.RUSAGE_THREAD).ru_majflt - faults,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/pymq-cold"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = args.dir / "store"
    shutil.rmtree(args.dir, ignore_errors=True)
    out: dict[str, Any] = {"mb": args.mb}
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
        out["cold"] = read_through(store, count)
        out["hot"] = read_through(store, count)
        out["cold_vs_hot"] = round(out["cold"]["mb_per_s"] / out["hot"]["mb_per_s"], 2)
        store.shutdown()
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
