"""Run with the rocketmq-python-client venv: transactional sends with the official 5.x Producer.

argv[1]: JSON {"endpoint", "topic", "messages": [{"body", "end": "commit" | "rollback" | "none"}],
               "checker": "commit" | "rollback" (what check-backs answer), "stay_s": seconds to stay up}
stdout: JSON {"sent": [message ids or errors], "checked": [bodies the server asked about]}
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution

args = json.loads(sys.argv[1])
checked = []
lock = threading.Lock()
answer = TransactionResolution.COMMIT if args.get("checker", "commit") == "commit" else TransactionResolution.ROLLBACK


class Checker(TransactionChecker):
    def check(self, message):
        with lock:
            checked.append(message.body.decode())
        return answer


config = ClientConfiguration(args["endpoint"], Credentials(), request_timeout=5)
producer = Producer(config, (args["topic"],), checker=Checker())
producer.startup()
sent = []
try:
    for spec in args["messages"]:
        msg = Message()
        msg.topic = args["topic"]
        msg.body = spec["body"].encode()
        try:
            tx = producer.begin_transaction()
            receipt = producer.send(msg, tx)
            if spec["end"] == "commit":
                tx.commit()
            elif spec["end"] == "rollback":
                tx.rollback()
            sent.append(receipt.message_id)
        except Exception as exc:  # reported to the test, which asserts on it
            sent.append(f"error: {type(exc).__name__}: {exc}")
    deadline = time.monotonic() + args.get("stay_s", 0)
    while time.monotonic() < deadline and len(checked) < args.get("expect_checks", 0):
        time.sleep(0.1)
    time.sleep(0.3 if args.get("expect_checks") else 0)  # the EndTransaction after the last check
finally:
    producer.shutdown()
with lock:
    print(json.dumps({"sent": sent, "checked": checked}))
