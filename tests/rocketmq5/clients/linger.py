"""Run with the rocketmq-python-client venv: start a 5.x Producer and SimpleConsumer, then wait.

argv[1]: JSON {"endpoint", "topic", "group", "ak"?, "sk"?}
Prints {"ready": true, "producer": <client id>, "consumer": <client id>} once both started, then
waits for a line on stdin ("stop": shut both down, print {"stopped": true}, exit 0).
"""

import json
import sys

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer

args = json.loads(sys.argv[1])
config = ClientConfiguration(args["endpoint"], Credentials(args.get("ak", ""), args.get("sk", "")), request_timeout=5)
producer = Producer(config, (args["topic"],))
consumer = SimpleConsumer(config, args["group"], {args["topic"]: FilterExpression("TagA||TagB")}, await_duration=1)
producer.startup()
consumer.startup()


def client_id(client):
    for name in ("client_id", "_Client__client_id"):
        if hasattr(client, name):
            return str(getattr(client, name))
    return ""


print(json.dumps({"ready": True, "producer": client_id(producer), "consumer": client_id(consumer)}), flush=True)
sys.stdin.readline()
consumer.shutdown()
producer.shutdown()
print(json.dumps({"stopped": True}), flush=True)
