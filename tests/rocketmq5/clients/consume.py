"""Run with the rocketmq-python-client venv: receive with the official 5.x SimpleConsumer.

argv[1]: JSON {"endpoint", "group", "topic", "count", "invisible_s", "await_s", "deadline_s",
               "then": "ack" | "nothing" | "extend:<s>" (then ack with the new handle)
                       | "extend_only:<s>" | "ack_old_after_extend:<s>" (ack with the replaced handle), "tag"?,
               "ak"?, "sk"? (credentials)}
Receives until ``count`` messages came or ``deadline_s`` passed, doing ``then`` to each.
stdout: JSON {"messages": [{"body", "tag", "keys", "props", "message_id", "attempt", "group"}], "errors": [...]}
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

args = json.loads(sys.argv[1])
config = ClientConfiguration(args["endpoint"], Credentials(args.get("ak", ""), args.get("sk", "")), request_timeout=5)
expr = FilterExpression(args["tag"]) if args.get("tag") else FilterExpression()
consumer = SimpleConsumer(config, args["group"], {args["topic"]: expr}, await_duration=args.get("await_s", 2))
consumer.startup()
got, errors = [], []
deadline = time.monotonic() + args.get("deadline_s", 15)
then = args.get("then", "ack")
try:
    while len(got) < args["count"] and time.monotonic() < deadline:
        try:
            messages = consumer.receive(32, args.get("invisible_s", 15)) or []
        except Exception as exc:
            errors.append(f"receive: {type(exc).__name__}: {exc}")
            time.sleep(0.2)
            continue
        for m in messages:
            got.append(
                {
                    "body": m.body.decode(),
                    "tag": m.tag,
                    "keys": sorted(m.keys),
                    "props": dict(m.properties),
                    "message_id": m.message_id,
                    "attempt": m.delivery_attempt,
                    "group": m.message_group,
                }
            )
            try:
                if then == "ack":
                    consumer.ack(m)
                elif then.startswith("extend:"):
                    consumer.change_invisible_duration(m, int(then.split(":")[1]))
                    consumer.ack(m)  # with the new handle
                elif then.startswith("extend_only:"):
                    consumer.change_invisible_duration(m, int(then.split(":")[1]))
                elif then.startswith("ack_old_after_extend:"):
                    old = m.receipt_handle
                    consumer.change_invisible_duration(m, int(then.split(":")[1]))
                    m.receipt_handle = old
                    consumer.ack(m)
            except Exception as exc:
                errors.append(f"{then}: {type(exc).__name__}: {exc}")
finally:
    consumer.shutdown()
print(json.dumps({"messages": got, "errors": errors}))
