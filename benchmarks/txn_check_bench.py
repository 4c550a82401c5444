"""What a transaction check round costs the broker's event loop after a busy interval, in process.

    python benchmarks/txn_check_bench.py [--halves 20000] [--waiting-every 100]

A real BrokerApp; ``--halves`` half messages go through the put path, and all but every
``--waiting-every``-th get their END_TRANSACTION (commits and rollbacks alternating), as a
producer at full speed leaves them between two check rounds (``transaction_check_interval_seconds``,
5 s: ~20,000 at 4,000 transactions/s). Then one round's refresh of the waiting messages
(``TransactionalMessageService.waiting``) is timed: it runs on the loop, so every request waits
for it. Prints its milliseconds and µs per half message stored since the last round, and checks
that exactly the ones left open are found waiting.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import uvloop

from pymq.broker.app import BrokerApp
from pymq.config import SMALL_STORE_SIZES, BrokerConfig
from pymq.logs import configure_logging
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.requests import EndTransactionRequest
from pymq.protocol.route import TopicConfig
from pymq.protocol.transaction import PGROUP, TRAN_MSG, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE


async def main(halves: int, waiting_every: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="pymq-txn-check-"))
    store = {"store_dir": str(root), **SMALL_STORE_SIZES, "commitlog_file_size": 256 << 20}
    app = BrokerApp(BrokerConfig.model_validate({"port": 0, "store": store}))
    await app.start()
    try:
        app.topics.upsert(TopicConfig("bench", 1, 1))
        props = encode_properties({"UNIQ_KEY": "ABCDEF0123456789ABCDEF0123456789", TRAN_MSG: "true", PGROUP: "g"})
        half = encode_record(b"bench", os.urandom(1024), props)
        service = app.transaction.service()
        service.refresh()  # the last round: nothing since
        left_open = 0
        for i in range(halves):
            stored = app.put_path.put("bench", 0, half)[0]
            if i % waiting_every == waiting_every - 1:
                left_open += 1
                continue
            outcome = TRANSACTION_COMMIT_TYPE if i % 2 else TRANSACTION_ROLLBACK_TYPE
            end = EndTransactionRequest(
                producer_group="g",
                tran_state_table_offset=stored.queue_offset,
                commit_log_offset=stored.physical_offset,
                commit_or_rollback=outcome,
            )
            assert service.end_transaction(end) in ("commit", "rollback")
        t0 = time.perf_counter()
        waiting = service.waiting()
        took = time.perf_counter() - t0
        assert len(waiting) == left_open, (len(waiting), left_open)
        print(
            f"check round after {halves:,} half messages ({left_open:,} waiting): "
            f"{took * 1e3:.1f} ms of event loop, {took / halves * 1e6:.2f} us a half message"
        )
    finally:
        await app.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--halves", type=int, default=20_000)
    ap.add_argument("--waiting-every", type=int, default=100)
    args = ap.parse_args()
    configure_logging("error")
    uvloop.run(main(args.halves, args.waiting_every))
