"""TopicRouteData bodies for 4.x clients from pymq's route model."""

from __future__ import annotations

import json

from pymq.protocol.route import BrokerData, QueueData, TopicRouteData
from pymq.remoting.route_body import topic_route_body


def test_route_body_has_the_4x_field_names_and_slaves_by_id() -> None:
    route = TopicRouteData(
        queueDatas=[QueueData("b0", readQueueNums=4, writeQueueNums=2, perm=6)],
        brokerDatas=[BrokerData("c0", "b0", {1: "127.0.0.1:10912", 0: "127.0.0.1:10911"})],
    )
    body = topic_route_body(route)
    assert json.loads(body) == {
        "brokerDatas": [
            {"brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10912"}, "brokerName": "b0", "cluster": "c0"}
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": "b0",
                "perm": 6,
                "readQueueNums": 4,
                "topicSynFlag": 0,
                "topicSysFlag": 0,
                "writeQueueNums": 2,
            }
        ],
    }
    assert body.startswith(b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":')
