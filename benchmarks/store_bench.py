"""Message store throughput, in-process, ASYNC_FLUSH, default file sizes (issue 3 targets).

* ``append_1k`` / ``append_128`` — put_messages msgs/s, batches of ``--batch`` records; every
  record carries a UNIQ_KEY and a TAGS property, as a producer sends them. Batches are encoded
  before the timed loop; the store runs with its background flusher and warmer, and the warmer
  gets its usual head start (the first 64 MiB prefaulted) before timing begins.
* ``read`` — sequential get_messages over one queue of the 1 KiB run, ``--pull-batch`` per call.
* ``query`` — query_by_key p50/p99 for random unique keys over the 128 B run (``--query-messages``
  keyed messages, default 1,000,000), default index config (5M slots, 20M entries per file).
* ``recovery`` — write ``--recovery-mb`` of 1 KiB messages, stop without a clean shutdown (abort
  file left, nothing flushed at exit), reopen: the abnormal recovery scan rate from
  ``store.recovery`` (every record's CRC checked, queues and index verified).

Each append figure is the median of ``--repeat`` runs on fresh stores (min and max shown too).

    python benchmarks/store_bench.py [--dir /tmp/store-bench] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pymq.broker.store import MessageStore
from pymq.config import FlushDiskType, StoreConfig
from pymq.logs import configure_logging
from pymq.protocol.record import encode_record, pack_host

TOPIC = "BenchTopic"
QUEUES = 4
TARGETS = {
    "append_1k_msgs_per_s": 300_000,
    "append_128_msgs_per_s": 300_000,
    "read_msgs_per_s": 500_000,
    "query_p99_ms": 5.0,
    "recovery_mb_per_s": 300.0,
}
BORN_HOST = pack_host("10.0.0.7", 51234)


def encode_batches(count: int, body_size: int, batch: int, first: int = 0) -> list[bytes]:
    """``count`` records in batches, each with a unique key and a tag, like a producer encodes them."""
    body = os.urandom(body_size)
    now = int(time.time() * 1000)
    out = []
    for start in range(first, first + count, batch):
        recs = []
        for i in range(start, min(start + batch, first + count)):
            props = b"UNIQ_KEY\x01" + uniq(i).encode() + b"\x02TAGS\x01Tag" + str(i % 4).encode() + b"\x02"
            recs.append(encode_record(TOPIC.encode(), body, props, born_timestamp=now, born_host=BORN_HOST))
        out.append(b"".join(recs))
    return out


def uniq(i: int) -> str:
    """A producer-style 32-hex-digit unique id."""
    return f"0A0B0C0D{i:024X}"


#: StoreConfig overrides from the command line (index sizes)
STORE_OVERRIDES: dict[str, Any] = {}


def open_store(root: Path, **overrides: Any) -> MessageStore:
    cfg = StoreConfig(store_dir=root, flush_disk_type=FlushDiskType.ASYNC_FLUSH, **{**STORE_OVERRIDES, **overrides})
    store = MessageStore(cfg)
    store.start()
    return store


def warmer_head_start(store: MessageStore, want: int = 64 << 20, timeout: float = 10.0) -> None:
    """Wait until the warmer prefaulted ``want`` bytes of the first file (a running broker's steady state)."""
    mf = store.commitlog.mfq.last
    deadline = time.monotonic() + timeout
    while mf is not None and mf.warm_lock is not None and mf.warm_pos < min(want, mf.size):
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)


def append_run(root: Path, batches: list[bytes], profile: bool = False) -> tuple[float, MessageStore]:
    """Messages per second for putting ``batches`` round-robin over the queues; returns the open store."""
    shutil.rmtree(root, ignore_errors=True)
    store = open_store(root)
    warmer_head_start(store)
    n = sum(count_records(b) for b in batches)
    put = getattr(store, "put", None) or store.put_messages  # put_messages before issue 29
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    t0 = time.perf_counter()
    for i, data in enumerate(batches):
        put(TOPIC, i % QUEUES, data)
    secs = time.perf_counter() - t0
    if prof:
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(15)
    assert store.max_offset(TOPIC, 0) > 0
    return n / secs, store


def count_records(data: bytes) -> int:
    n = pos = 0
    while pos < len(data):
        pos += int.from_bytes(data[pos : pos + 4], "big")
        n += 1
    return n


def bench_read(store: MessageStore, pull_batch: int) -> float:
    total = store.max_offset(TOPIC, 0)
    get = store.get_messages
    offset = count = 0
    t0 = time.perf_counter()
    while offset < total:
        res = get("bench", TOPIC, 0, offset, pull_batch)
        count += res.message_count
        offset = res.next_begin_offset
    secs = time.perf_counter() - t0
    assert count == total
    return count / secs


def bench_query(store: MessageStore, messages: int, queries: int) -> tuple[float, float, float]:
    rng = random.Random(1)
    keys = [uniq(rng.randrange(messages)) for _ in range(queries)]
    lat = []
    for key in keys:
        t = time.perf_counter_ns()
        found = store.query_by_key(TOPIC, key, 32)
        lat.append((time.perf_counter_ns() - t) / 1e6)
        assert len(found) == 1, key
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)], lat[-1]


def bench_recovery(root: Path, megabytes: int) -> dict[str, float]:
    shutil.rmtree(root, ignore_errors=True)
    store = open_store(root)
    per_batch = 64 * 1100
    written = 0
    i = 0
    while written < megabytes * 1_000_000:
        data = encode_batches(64 * 64, 1024, 64, first=i)  # encoded as we go: it need not fit in memory
        for j, b in enumerate(data):
            store.put(TOPIC, j % QUEUES, b)
        i += 64 * 64
        written += len(data) * per_batch
    end = store.commitlog.max_offset
    store.halt()  # no shutdown: the abort file stays and nothing is flushed at exit
    t0 = time.perf_counter()
    store = open_store(root)
    start_secs = time.perf_counter() - t0
    rep = store.recovery
    assert rep is not None and rep.abnormal and rep.commitlog_end == end
    store.shutdown()
    shutil.rmtree(root, ignore_errors=True)
    return {
        "recovery_mb_per_s": rep.mb_per_second,
        "recovery_scanned_mb": rep.scanned_bytes / 1e6,
        "recovery_seconds": rep.seconds,
        "recovery_start_seconds": start_secs,
        "recovery_records": rep.scanned_records,
    }


def median_run(
    label: str, root: Path, batches: list[bytes], repeat: int, profile: bool
) -> tuple[dict[str, float], MessageStore]:
    rates = []
    store = None
    for r in range(repeat):
        if store is not None:
            store.shutdown()
        rate, store = append_run(root, batches, profile=profile and r == 0)
        rates.append(rate)
    assert store is not None
    return {
        f"{label}_msgs_per_s": statistics.median(rates),
        f"{label}_min": min(rates),
        f"{label}_max": max(rates),
    }, store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/pymq-store-bench"))
    ap.add_argument("--messages-1k", type=int, default=400_000, help="messages in the 1 KiB append run")
    ap.add_argument("--query-messages", type=int, default=1_000_000, help="messages in the 128 B run")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--pull-batch", type=int, default=32)
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--recovery-mb", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["append", "read", "query", "recovery"], action="append")
    ap.add_argument("--profile", action="store_true", help="cProfile the first append run of each size")
    ap.add_argument("--index-slots", type=int, default=StoreConfig().index_hash_slots)
    ap.add_argument("--index-entries", type=int, default=StoreConfig().index_max_entries)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    STORE_OVERRIDES.update(index_hash_slots=args.index_slots, index_max_entries=args.index_entries)
    configure_logging("warning", json=False)
    only = set(args.only or ["append", "read", "query", "recovery"])
    results: dict[str, Any] = {
        "loadavg_at_start": os.getloadavg()[0],
        "index_slots": args.index_slots,
        "index_entries": args.index_entries,
    }
    root = args.dir
    root.mkdir(parents=True, exist_ok=True)
    try:
        if only & {"append", "read"}:
            batches = encode_batches(args.messages_1k, 1024, args.batch)
            stats, store = median_run("append_1k", root / "a1k", batches, args.repeat, args.profile)
            results.update(stats)
            del batches
            if "read" in only:
                results["read_msgs_per_s"] = bench_read(store, args.pull_batch)
            store.shutdown()
            shutil.rmtree(root / "a1k", ignore_errors=True)
        if only & {"append", "query"}:
            batches = encode_batches(args.query_messages, 128, args.batch)
            stats, store = median_run("append_128", root / "a128", batches, args.repeat, args.profile)
            results.update(stats)
            del batches
            if "query" in only:
                p50, p99, worst = bench_query(store, args.query_messages, args.queries)
                results.update(query_p50_ms=p50, query_p99_ms=p99, query_max_ms=worst)
            store.shutdown()
            shutil.rmtree(root / "a128", ignore_errors=True)
        if "recovery" in only:
            results.update(bench_recovery(root / "rec", args.recovery_mb))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"load average at start: {results['loadavg_at_start']:.2f}")
    print(f"index files: {args.index_slots:,} slots, {args.index_entries:,} entries")
    print(f"{'metric':<26}{'value':>14}{'target':>12}  ok")
    for key, target in TARGETS.items():
        if key not in results:
            continue
        value = results[key]
        ok = value <= target if key.endswith("_ms") else value >= target
        print(f"{key:<26}{value:>14,.2f}{target:>12,}  {'yes' if ok else 'NO'}")
    for key, value in results.items():
        if key not in TARGETS and key not in ("loadavg_at_start", "index_slots", "index_entries"):
            print(f"  {key:<24}{value:>14,.2f}")


if __name__ == "__main__":
    main()
