"""Many queues on one store, in-process (issue 19): first touches, steady puts, restart times.

* ``first_touch`` — one 1 KiB message into each of ``--queues`` queues (over ``--topics``
  topics): every put creates a queue directory and file (msgs/s). The files are made on the
  store's maker thread; ``files_made_after_seconds`` is how long it still took once the puts
  returned (the steady phase starts after it).
* ``steady`` — ``--rounds`` more messages per queue, round robin over all queues (msgs/s),
  and the same number of messages over 8 queues right after (``ratio_vs_8_queues``).
* ``clean_restart`` — shutdown, then start again: seconds, and consume-queue files mapped
  at start (0 expected: the queue ends are restored from ``queue_ends``).
* ``crash_restart`` — ``halt()`` (what kill -9 leaves), start again: seconds (abnormal
  recovery maps and searches each queue's last file, through the LRU).
* ``read_all`` — one pull (``get_messages``) per queue after the crash restart (queues/s).

Consume-queue files are small by default (``--cq-entries``), so 10,000 of them fit on a
test disk; the file count, not their size, is what this measures.

    python benchmarks/scale_bench.py [--queues 10000] [--topics 10] [--dir /tmp/pymq-scale] [--json]
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

BORN_HOST = pack_host("10.0.0.7", 51234)


def config(root: Path, args: argparse.Namespace) -> StoreConfig:
    return StoreConfig(
        store_dir=root,
        commitlog_file_size=256 * 1024 * 1024,
        consume_queue_file_entries=args.cq_entries,
        index_hash_slots=500_000,
        index_max_entries=2_000_000,
        cleanup_interval_ms=3_600_000,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cq-entries", type=int, default=2_000)
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/pymq-scale"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = args.dir / "store"
    shutil.rmtree(args.dir, ignore_errors=True)
    per_topic = max(1, args.queues // args.topics)
    queues = [(f"Scale{i // per_topic}", i % per_topic) for i in range(args.queues)]
    body = os.urandom(args.body_size)
    topics = {t for t, _ in queues} | {"Few"}
    records = {t: encode_record(t.encode(), body, b"", born_host=BORN_HOST) for t in topics}
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    out: dict[str, Any] = {"queues": args.queues, "topics": args.topics, "nofile": nofile}

    def put_round(qs: list[tuple[str, int]]) -> float:
        t0 = time.perf_counter()
        for topic, qid in qs:
            store.put(topic, qid, records[topic])
        return time.perf_counter() - t0

    try:
        store = MessageStore(config(root, args))
        store.start()
        out["first_touch_msgs_per_s"] = round(len(queues) / put_round(queues))
        # New files are made on the maker thread (file_maker): wait for it before the steady phase.
        t0 = time.perf_counter()
        pool = getattr(store, "map_pool", None)
        while pool is not None and getattr(pool, "pending", None):
            time.sleep(0.001)
        out["files_made_after_seconds"] = round(time.perf_counter() - t0, 3)
        steady = sum(put_round(queues) for _ in range(args.rounds))
        out["steady_msgs_per_s"] = round(len(queues) * args.rounds / steady)
        few = [("Few", q) for q in range(8)]
        put_round(few)  # create them first
        few_round = few * (len(queues) // 8)
        few_seconds = sum(put_round(few_round) for _ in range(args.rounds))
        out["steady_8_queues_msgs_per_s"] = round(len(few_round) * args.rounds / few_seconds)
        out["ratio_vs_8_queues"] = round(out["steady_msgs_per_s"] / out["steady_8_queues_msgs_per_s"], 2)
        # (older trees, before the map pool, map every file: None)
        pool = getattr(store, "map_pool", None)
        out["mapped_files"] = len(pool) if pool is not None else None
        out["open_fds"] = len(os.listdir("/proc/self/fd"))
        store.shutdown()

        t0 = time.perf_counter()
        store = MessageStore(config(root, args))
        store.start()
        out["clean_restart_seconds"] = round(time.perf_counter() - t0, 3)
        pool = getattr(store, "map_pool", None)
        out["files_mapped_at_clean_restart"] = pool.maps if pool is not None else None
        store.halt()

        t0 = time.perf_counter()
        store = MessageStore(config(root, args))
        store.start()
        out["crash_restart_seconds"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        for topic, qid in queues:
            store.get_messages("g", topic, qid, 0, 32)
        out["read_all_queues_per_s"] = round(len(queues) / (time.perf_counter() - t0))
        store.shutdown()
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(out) if args.json else "\n".join(f"{k:32} {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
