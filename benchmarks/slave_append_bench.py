"""What a replicating slave spends per record: ``MessageStore.append_raw`` of its master's bytes.

    python benchmarks/slave_append_bench.py [--records 40000] [--frames 4 32] [--rounds 3] [--thread] [--json]

A master store gets ``--records`` 1 KiB records (8 queues, a tag, a key and a unique key each,
as a producer sends them); its commitlog is then fed to an empty replica store in frames of
``--frames`` records each (4: what a SYNC_MASTER frame carries at 8 producers; 32: an
ASYNC_MASTER's), as the HA slave does: verify, write, build consume queues and the index. The
figure is the replica's CPU µs per record (process time over the appends; no sockets; with
``--thread`` the calling thread's alone, without the store's flush and warm-up threads: steadier
for comparing the append and dispatch code). Each frame size runs ``--rounds`` times on a fresh
replica; the best round is reported.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pymq.broker.store import MessageStore
from pymq.config import StoreConfig
from pymq.protocol.record import encode_properties, encode_record

STORE_HOST = "127.0.0.1:10911"


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_dir=root, commitlog_file_size=64 * 1024 * 1024)


def master_bytes(root: Path, records: int) -> tuple[bytes, list[int]]:
    """The master's commitlog after ``records`` puts, and each record's end offset."""
    store = MessageStore(_config(root), store_host=STORE_HOST)
    store.start()
    try:
        body = b"x" * 1024
        for i in range(records):
            props = encode_properties({"TAGS": "TagA", "KEYS": f"order-{i}", "UNIQ_KEY": f"U{i:012d}"})
            store.put("bench", i % 8, encode_record(b"bench", body, props, born_timestamp=1_700_000_000_000))
        ends = [mf.file_from + pos + size for mf, pos, size, *_rest in store.commitlog.scan(0, False)]
        views = store.read_commitlog(0, store.commitlog.max_offset)
        return b"".join(bytes(v) for v in views), ends
    finally:
        store.shutdown()


def replica_cpu_us(root: Path, data: bytes, ends: list[int], frame: int, clock: Callable[[], float]) -> float:
    """CPU µs per record of appending ``data`` to an empty replica, ``frame`` records a call."""
    replica = MessageStore(_config(root), store_host=STORE_HOST)
    replica.start()
    try:
        cuts = ends[frame - 1 :: frame]
        if cuts[-1] != ends[-1]:
            cuts.append(ends[-1])
        view = memoryview(data)
        offset = 0
        cpu = clock()
        for end in cuts:
            offset = replica.append_raw(offset, view[offset:end])
        spent = clock() - cpu
        assert offset == len(data)
        return spent / len(ends) * 1e6
    finally:
        replica.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=40_000)
    ap.add_argument("--frames", type=int, nargs="+", default=[4, 32])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--thread", action="store_true", help="the calling thread's CPU time only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pymq-slave-append-"))
    try:
        data, ends = master_bytes(tmp / "master", args.records)
        out: dict[str, float] = {}
        for frame in args.frames:
            best = float("inf")
            for r in range(args.rounds):
                clock = time.thread_time if args.thread else time.process_time
                best = min(best, replica_cpu_us(tmp / f"replica-{frame}-{r}", data, ends, frame, clock))
                shutil.rmtree(tmp / f"replica-{frame}-{r}", ignore_errors=True)
            out[f"frame_{frame}_cpu_us_per_record"] = round(best, 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
    else:
        for name, value in out.items():
            print(f"{name:32s} {value:8.2f}")


if __name__ == "__main__":
    main()
