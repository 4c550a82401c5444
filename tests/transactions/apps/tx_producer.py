"""A transactional producer process for tests, meant to be SIGKILLed between the half send and the commit.

usage: tx_producer.py NAMESRV GROUP DB_PATH OUT_DIR BODY...

For each BODY it sends a transactional message to topic ``orders``; the local transaction
inserts BODY into the SQLite table ``orders`` (and commits) when BODY starts with "keep",
does nothing otherwise, then writes OUT_DIR/BODY.local and never returns, so the producer
never sends END_TRANSACTION: the test kills it and another producer answers the check-back.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

from pymq.client import Message, TransactionProducer, TransactionState


async def main() -> None:
    namesrv, group, db_path, out_dir, *bodies = sys.argv[1:]

    async def local_tx(msg: Message, body: str) -> TransactionState:
        if body.startswith("keep"):
            with sqlite3.connect(db_path) as db:
                db.execute("INSERT INTO orders(body) VALUES (?)", (body,))
        (Path(out_dir) / f"{body}.local").write_text("done")
        await asyncio.Event().wait()  # "crash" before deciding: the test SIGKILLs us here
        return TransactionState.COMMIT

    async with TransactionProducer(namesrv, group, lambda m: TransactionState.UNKNOWN) as producer:
        await asyncio.gather(
            *(producer.send_in_transaction(Message("orders", b.encode()), local_tx, b) for b in bodies)
        )


if __name__ == "__main__":
    asyncio.run(main())
