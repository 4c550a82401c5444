"""Run with the rocketmq-python-client venv: consume with the official 5.x PushConsumer.

argv[1]: JSON {"endpoint", "group", "topic", "count", "deadline_s", "fail_once": [bodies]}
The listener answers FAILURE the first time it sees a body in ``fail_once`` (the client then
makes the message invisible for its backoff delay), SUCCESS otherwise. Stops once ``count``
messages were consumed successfully, or at the deadline.
stdout: JSON {"consumed": [{"body", "attempt", "message_id"}], "failed": [bodies]}
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, ConsumeResult, Credentials, FilterExpression, MessageListener, PushConsumer

args = json.loads(sys.argv[1])
consumed, failed = [], []
lock = threading.Lock()
done = threading.Event()
fail_once = set(args.get("fail_once", []))


class Listener(MessageListener):
    def consume(self, message):
        body = message.body.decode()
        with lock:
            if body in fail_once and body not in failed:
                failed.append(body)
                return ConsumeResult.FAILURE
            consumed.append({"body": body, "attempt": message.delivery_attempt, "message_id": message.message_id})
            if len(consumed) >= args["count"]:
                done.set()
        return ConsumeResult.SUCCESS


config = ClientConfiguration(args["endpoint"], Credentials(), request_timeout=5)
subscription = {args["topic"]: FilterExpression()}
consumer = PushConsumer(config, args["group"], Listener(), subscription, consumption_thread_count=2)
consumer.startup()
try:
    done.wait(args.get("deadline_s", 20))
    time.sleep(0.3)  # let the last acks go out
finally:
    consumer.shutdown()
with lock:
    print(json.dumps({"consumed": consumed, "failed": failed}))
