"""Consume with the RocketMQ C++ client's push consumer; one JSON line per message handed to the listener.

Usage: consume_push.py NAMESRV GROUP TOPIC EXPRESSION INSTANCE MODEL ORDERLY STOP_FILE OUT_FILE [PROPERTY ...]

MODEL is ``clustering`` or ``broadcasting``; ORDERLY ``1`` registers an orderly listener. Runs until
STOP_FILE exists (or 120 s), then shuts the consumer down. Each line: topic, tags, keys, body (hex;
the C API hands the body over as a C string, so it ends at the first NUL byte), id, queue id and
offset, reconsume times, the asked-for properties, the consumer's instance and a thread id.

With FAIL_BELOW=N in the environment the listener answers RECONSUME_LATER while a message's
reconsume times are below N (the client then sends it back: CONSUMER_SEND_MSG_BACK); ``always``
fails every time. Messages tagged ``warm`` (the tests' warm-up rounds) always succeed.
"""

import json
import os
import sys
import threading
import time

from rocketmq.client import ConsumeStatus, PushConsumer
from rocketmq.ffi import MessageModel

namesrv, group, topic, expression, instance, model, orderly, stop_file, out_file, *props = sys.argv[1:]
lock = threading.Lock()
fail_below = os.environ.get("FAIL_BELOW", "0")
out = open(out_file, "a", buffering=1)  # noqa: SIM115 - closed at exit


def on_message(msg):
    row = {
        "instance": instance,
        "thread": threading.get_ident(),
        "topic": msg.topic,
        "tags": (msg.tags or b"").decode(),
        "keys": (msg.keys or b"").decode(),
        "body": (msg.body or b"").hex(),
        "id": msg.id,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times,
        "commit_log_offset": msg.commit_log_offset,
        "store_timestamp": msg.store_timestamp,
        "born_timestamp": msg.born_timestamp,
        "props": {p: (msg.get_property(p) or b"").decode() for p in props},
    }
    with lock:
        out.write(json.dumps(row) + "\n")
    if row["tags"] != "warm" and (fail_below == "always" or msg.reconsume_times < int(fail_below)):
        return ConsumeStatus.RECONSUME_LATER
    return ConsumeStatus.CONSUME_SUCCESS


model_value = MessageModel.BROADCASTING if model == "broadcasting" else MessageModel.CLUSTERING
consumer = PushConsumer(group, orderly=orderly == "1", message_model=model_value)
consumer.set_namesrv_addr(namesrv)
consumer.set_instance_name(instance)
consumer.subscribe(topic, on_message, expression)
consumer.start()
print("started", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(stop_file) and time.monotonic() < deadline:
    time.sleep(0.1)
consumer.shutdown()
out.close()
print("stopped", flush=True)
