"""Columnar vs row-by-row Spark record decoding, µs per row (in process, no Spark).

    python benchmarks/arrow_decode_bench.py

Decodes 40 chunks of 240 records of 1 KiB with UNIQ_KEY, TAGS and KEYS (best of 5), both ways,
and checks that both give the same batch.
"""
import os, time
from pymq.protocol.record import encode_record, encode_properties
from pymq.spark_connector.arrow import records_to_batch, records_to_batch_by_rows
props = encode_properties({"UNIQ_KEY": "ABCDEF0123456789ABCDEF0123456789", "TAGS": "TagA", "KEYS": "k1 k2"})
rec = encode_record(b"bench", os.urandom(1024), props)
chunks = [rec * 240] * 40
for f in (records_to_batch_by_rows, records_to_batch):
    f(chunks, "b")
    best = 1e9
    for _ in range(5):
        t = time.perf_counter(); b = f(chunks, "broker-a"); best = min(best, time.perf_counter() - t)
    print(f.__name__, f"{b.num_rows/best:,.0f} rows/s  {best/b.num_rows*1e6:.2f} us/row")
a = records_to_batch_by_rows(chunks, "x"); b = records_to_batch(chunks, "x")
print(a.equals(b))
