"""Columnar vs row-by-row Spark record decoding, µs per row (in process, no Spark).

    python benchmarks/arrow_decode_bench.py [--chunks 40] [--repeat 5]

Decodes CHUNKS chunks of 240 records of 1 KiB with UNIQ_KEY, TAGS and KEYS (best of REPEAT),
both ways, and checks that both give the same batch: exit code 1, naming the first column that
differs, when they do not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pymq.protocol.record import encode_properties, encode_record
from pymq.spark_connector.arrow import records_to_batch, records_to_batch_by_rows

Decoder = Callable[[list[bytes], str], Any]


def chunks_of(count: int) -> list[bytes]:
    props = encode_properties({"UNIQ_KEY": "ABCDEF0123456789ABCDEF0123456789", "TAGS": "TagA", "KEYS": "k1 k2"})
    rec = encode_record(b"bench", os.urandom(1024), props)
    return [rec * 240] * count


def difference(a: Any, b: Any) -> str | None:
    """None when the two batches are equal, else what differs first (schema, row count or a column)."""
    if a.equals(b):
        return None
    if not a.schema.equals(b.schema):
        return f"schemas differ: {a.schema} vs {b.schema}"
    if a.num_rows != b.num_rows:
        return f"{a.num_rows} rows vs {b.num_rows}"
    for name in a.schema.names:
        if not a.column(name).equals(b.column(name)):
            return f"column {name!r} differs"
    return "batches differ"  # (metadata only)


def main(argv: list[str] | None = None, decoders: tuple[Decoder, Decoder] | None = None) -> int:
    """``decoders``: (reference, columnar), the real two by default."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    by_rows, columnar = decoders or (records_to_batch_by_rows, records_to_batch)
    chunks = chunks_of(args.chunks)
    for f in (by_rows, columnar):
        f(chunks, "b")  # warm up
        best = 1e9
        for _ in range(args.repeat):
            t = time.perf_counter()
            b = f(chunks, "broker-a")
            best = min(best, time.perf_counter() - t)
        print(f"{f.__name__}: {b.num_rows / best:,.0f} rows/s  {best / b.num_rows * 1e6:.2f} us/row")
    diff = difference(by_rows(chunks, "x"), columnar(chunks, "x"))
    print("same batch" if diff is None else f"DECODERS DIFFER: {diff}")
    return 0 if diff is None else 1


if __name__ == "__main__":
    sys.exit(main())
