"""The C accelerator (pymq._speedups) against the pure-Python record code, function by function, in one process.

    python benchmarks/accel_bench.py [--records 64] [--body-size 1024] [--rounds 7] [--json]

Each row times one accelerated function on one batch (µs per call, best of ``--rounds``),
first with the accelerator and then with ``pymq.protocol.record.speedups`` set to None (what
``PYMQ_NO_SPEEDUPS=1`` does), interleaved round by round so that both see the same machine.
No files, no sockets: the CPU of the per-record loops only (``put_path_bench.py`` adds the
store's memcpy into fresh mapped pages, whose page faults swing its batch figure).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
import types
import zlib
from collections.abc import Callable
from typing import Any

from pymq.broker.store.dispatcher import Dispatcher, pack_entries
from pymq.broker.store.index import IndexFile, index_file_size
from pymq.protocol import record
from pymq.protocol.batch_encode import encode_batch
from pymq.protocol.message import Message, iter_messages
from pymq.protocol.record import encode_properties, encode_record, iter_records, pack_host, topic_field
from pymq.protocol.record_batch import any_property_contains, patch_broker_blocks, split_batch

HOST = pack_host("10.0.0.1", 10911)


def best_us(fn: Callable[[], Any], rounds: int, number: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t) / number)
    return best * 1e6


def cases(records: int, body_size: int) -> dict[str, Callable[[], Any]]:
    props = encode_properties({"UNIQ_KEY": "7F0000010B1A18B4AAC2000000000000", "TAGS": "TagA"})
    bodies = [os.urandom(body_size) for _ in range(records)]
    batch = b"".join(encode_record(b"bench", b, props, born_host=HOST) for b in bodies)
    tf = topic_field(b"bench")
    split = split_batch(batch, tf, 4 << 20)
    target = bytearray(len(batch))
    phys = [1 << 30 | p for p in split.positions]
    dispatcher = Dispatcher(lambda t, q: None, None)  # type: ignore[arg-type,return-value]
    messages = [Message("bench", b) for b in bodies]
    counter = itertools.count()
    pulled = b"".join(encode_record(b"bench", b, props, queue_offset=i, store_host=HOST) for i, b in enumerate(bodies))

    # an index file on an in-memory buffer (the store's default slot count), rewound before each batch
    slots, max_entries = 5_000_000, 4 * records
    mf = types.SimpleNamespace(mm=bytearray(index_file_size(slots, max_entries)))
    index = IndexFile(mf, slots, max_entries, new=True)  # type: ignore[arg-type]
    entries = [(zlib.crc32(b"bench#%d" % i), 1 << 30 | i) for i in range(records)]

    def index_put() -> None:
        index.count = 1
        index.put_many(entries, 1_764_000_000_000)

    def dispatch_codes() -> Any:
        # what Dispatcher.dispatch computes per batch (tags codes, index entries), without the writes
        from pymq.protocol.record_batch import property_codes

        fast = property_codes(batch, split.positions, split.sizes, split.props_ats, phys, 12345)
        if fast is not None:
            return fast
        codes = dispatcher.codes
        out = []
        for pos, size, props_at, at in zip(split.positions, split.sizes, split.props_ats, phys, strict=True):
            _code, keys = codes(batch[props_at : pos + size])
            out += [(zlib.crc32(k, 12345), at) for k in keys or ()]
        return out

    return {
        "encode_record x N (client)": lambda: [encode_record(b"bench", b, props, born_host=HOST) for b in bodies],
        "encode_batch (client, ids)": lambda: encode_batch(
            messages, "bench", b"bench", 1_764_000_000_000, HOST, 4 << 20, 4096, "0A0000010B1A18B4AAC200D2F1A3", counter
        ),
        "split_batch": lambda: split_batch(batch, tf, 4 << 20),
        "any_property_contains": lambda: any_property_contains(batch, split, b"DELAY\x01"),
        "patch_broker_blocks": lambda: patch_broker_blocks(target, split.positions, 1, 100, 1 << 30, 1, HOST),
        "dispatch codes": dispatch_codes,
        "consume-queue entries": lambda: pack_entries(phys, split.sizes, [0] * len(phys)),
        "index put_many": index_put,
        "iter_records (decode)": lambda: list(iter_records(pulled)),
        "iter_messages (decode)": lambda: list(iter_messages(pulled)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    accelerator = record.speedups
    if accelerator is None:
        raise SystemExit("pymq._speedups is not loaded (not built, or PYMQ_NO_SPEEDUPS is set)")
    rows: dict[str, dict[str, float]] = {}
    for name, fn in cases(args.records, args.body_size).items():
        c = py = float("inf")
        for _ in range(args.rounds):
            record.speedups = accelerator
            c = min(c, best_us(fn, 1, 200))
            record.speedups = None
            py = min(py, best_us(fn, 1, 200))
        record.speedups = accelerator
        rows[name] = {"c_us": round(c, 2), "python_us": round(py, 2), "speedup": round(py / c, 2)}
    if args.json:
        print(json.dumps({"records": args.records, "body_size": args.body_size, "rows": rows}, indent=2))
        return
    print(f"one batch of {args.records} records of {args.body_size} B, µs per call, best of {args.rounds}")
    print(f"  {'':28} {'C':>9} {'Python':>9} {'Python/C':>9}")
    for name, r in rows.items():
        print(f"  {name:28} {r['c_us']:9.2f} {r['python_us']:9.2f} {r['speedup']:8.2f}x")


if __name__ == "__main__":
    main()
