"""A transactional producer of the RocketMQ C++ client (TransactionMQProducer).

Usage:
  produce_tx.py NAMESRV GROUP send TOPIC BODY:OUTCOME ... [--hang]
      sends each BODY in a transaction whose local outcome is OUTCOME (commit, rollback, unknown);
      prints {"results": [...]} and, with --hang, then waits to be killed (its checker says UNKNOWN).
  produce_tx.py NAMESRV GROUP check SECONDS
      only answers the broker's check-backs (COMMIT) for SECONDS; prints one JSON line per check.
"""

import json
import sys
import time

from rocketmq.client import Message, TransactionMQProducer, TransactionStatus

namesrv, group, mode, *rest = sys.argv[1:]
OUTCOMES = {
    "commit": TransactionStatus.COMMIT,
    "rollback": TransactionStatus.ROLLBACK,
    "unknown": TransactionStatus.UNKNOWN,
}


def checker(msg):
    if mode == "check":
        print(
            json.dumps({"checked": msg.body.decode(), "topic": msg.topic, "id": msg.id, "queue_id": msg.queue_id}),
            flush=True,
        )
        return TransactionStatus.COMMIT
    return TransactionStatus.UNKNOWN


producer = TransactionMQProducer(group, checker, timeout=5000)
producer.set_namesrv_addr(namesrv)
producer.start()
try:
    if mode == "send":
        topic, *items = rest
        hang = "--hang" in items
        results = []
        for item in (i for i in items if i != "--hang"):
            body, _, outcome = item.partition(":")
            msg = Message(topic)
            msg.set_body(body.encode())
            msg.set_keys(f"key-{body}")
            r = producer.send_message_in_transaction(msg, lambda m, args, o=outcome: OUTCOMES[o], None)
            results.append({"body": body, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
        print(json.dumps({"results": results}), flush=True)
        while hang:
            time.sleep(1)
    else:
        time.sleep(float(rest[0]))
finally:
    producer.shutdown()
