"""Run with the rocketmq-python-client venv: send messages with the official 5.x Producer.

argv[1]: JSON {"endpoint", "topic",
               "messages": [{"body" | "body_hex" (any bytes), "tag"?, "keys"?, "props"?, "group"?, "delay_s"?}],
               "ak"?, "sk"? (credentials: the client signs every call with them)}
stdout: JSON list, one {"message_id"} or {"error"} per message; {"startup_error"} if the producer did not start.
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer

args = json.loads(sys.argv[1])
credentials = Credentials(args.get("ak", ""), args.get("sk", ""))
producer = Producer(ClientConfiguration(args["endpoint"], credentials, request_timeout=5), (args["topic"],))
try:
    producer.startup()
except Exception as exc:  # reported to the test, which asserts on it
    print(json.dumps({"startup_error": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
out = []
try:
    for spec in args["messages"]:
        msg = Message()
        msg.topic = args["topic"]
        msg.body = bytes.fromhex(spec["body_hex"]) if "body_hex" in spec else spec["body"].encode()
        if spec.get("tag"):
            msg.tag = spec["tag"]
        for key in spec.get("keys", []):
            msg.keys = key  # the setter adds one key per assignment
        for k, v in spec.get("props", {}).items():
            msg.add_property(k, v)
        if spec.get("group"):
            msg.message_group = spec["group"]
        if spec.get("delay_s"):  # this client's delivery_timestamp is in whole seconds since the epoch
            msg.delivery_timestamp = int(time.time()) + spec["delay_s"]
        try:
            receipt = producer.send(msg)
            out.append({"message_id": receipt.message_id})
        except Exception as exc:  # reported to the test, which asserts on it
            out.append({"error": f"{type(exc).__name__}: {exc}"})
finally:
    producer.shutdown()
print(json.dumps(out))
