"""Send one message with the RocketMQ C++ client's sync producer; print the result as JSON.

Usage: sync_producer.py NAMESRV TOPIC TAGS KEYS BODY [NAME=VALUE ...]
"""

import json
import sys

from rocketmq.client import Message, Producer

namesrv, topic, tags, keys, body, *props = sys.argv[1:]
producer = Producer("PG_PYMQ_R30", timeout=5000)
producer.set_namesrv_addr(namesrv)
producer.start()
msg = Message(topic)
msg.set_tags(tags)
msg.set_keys(keys)
msg.set_body(body.encode())
for item in props:
    k, _, v = item.partition("=")
    msg.set_property(k, v)
try:
    r = producer.send_sync(msg)
    print(json.dumps({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset}))
except Exception as e:  # the client's own error, reported to the test
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
finally:
    producer.shutdown()
