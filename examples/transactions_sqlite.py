"""Transactional messages with a local SQLite transaction: an order row and its event commit together.

Run against the local cluster from the README (``pymq-local`` on 127.0.0.1:9876, topic ``orders``):

    python examples/transactions_sqlite.py --namesrv 127.0.0.1:9876 --db /tmp/shop.db

For each order the producer sends an ``order-placed`` half message (invisible to consumers),
inserts the order row in one SQLite transaction, then commits the message; a duplicate
order fails the insert and rolls the message back. One order "crashes" between its insert
and the commit (the local transaction answers UNKNOWN): the broker checks back after its
transaction timeout (6 s by default) and the checker finds the row, so the message is
committed anyway. A consumer then prints what arrived: exactly the orders in the table.
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from pathlib import Path

from pymq.client.sync import (
    ConsumeFromWhere,
    Message,
    MessageExt,
    PullConsumer,
    TransactionProducer,
    TransactionState,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--db", default="shop.db", help="SQLite file (created)")
    parser.add_argument("--group", default="order-service")
    args = parser.parse_args()

    db_path = Path(args.db)
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE IF NOT EXISTS orders(id TEXT PRIMARY KEY, amount INTEGER)")
    db.commit()

    def place_order(msg: Message, order: tuple[str, int, bool]) -> TransactionState:
        """The local transaction: runs after the half message is stored, before the commit."""
        order_id, amount, crash = order
        try:
            with db:  # one SQLite transaction: committed on leaving the block
                db.execute("INSERT INTO orders VALUES (?, ?)", (order_id, amount))
        except sqlite3.IntegrityError:
            return TransactionState.ROLLBACK  # nothing was written: nobody may hear of it
        if crash:
            return TransactionState.UNKNOWN  # as if the process died here: the broker will ask
        return TransactionState.COMMIT

    def check(msg: MessageExt) -> TransactionState:
        """The broker asks about a message left without an outcome; the database knows (own connection)."""
        with sqlite3.connect(db_path) as conn:
            row = conn.execute("SELECT 1 FROM orders WHERE id = ?", (msg.keys[0],)).fetchone()
        return TransactionState.COMMIT if row else TransactionState.ROLLBACK

    run = str(int(time.time() * 1000))
    orders = [(f"{run}-1", 30, False), (f"{run}-2", 45, True), (f"{run}-1", 99, False), (f"{run}-3", 12, False)]
    with TransactionProducer(args.namesrv, args.group, check) as producer:
        for order in orders:
            msg = Message(args.topic, f"order-placed {order[0]} {order[1]}".encode(), tags="placed", keys=[order[0]])
            result = producer.send_in_transaction(msg, place_order, order)
            print(f"order {order[0]} amount {order[1]}: {result.local_state.name}")

        expected = {row[0] for row in db.execute("SELECT id FROM orders WHERE id LIKE ?", (f"{run}-%",))}
        consumer = PullConsumer(args.namesrv, f"shop-audit-{run}", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe(args.topic, "placed")
        seen: set[str] = set()
        deadline = time.monotonic() + 60  # the crashed one arrives after the broker's check-back
        with consumer:
            while seen != expected and time.monotonic() < deadline:
                for m in consumer.poll(timeout=1.0):
                    if m.keys and m.keys[0].startswith(f"{run}-"):
                        seen.add(m.keys[0])
    print(f"in the table: {len(expected)} orders; delivered: {len(seen)}; same: {seen == expected}")


if __name__ == "__main__":
    main()
