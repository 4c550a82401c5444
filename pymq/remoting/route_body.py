"""pymq's route model as the JSON bodies RocketMQ 4.x clients parse (TopicRouteData).

fastjson writes ``brokerAddrs`` keyed by the bare number (``{0:"host:port"}``), which is not
JSON; clients also accept the quoted form written here. ``topicSynFlag`` (the 4.x name
before 4.9's ``topicSysFlag``) is written as well so older clients find it.
"""

from __future__ import annotations

import json
from typing import Any

from pymq.protocol.route import TopicRouteData

__all__ = ["topic_route_body"]


def topic_route_body(route: TopicRouteData) -> bytes:
    """GET_ROUTEINFO_BY_TOPIC's response body for ``route`` (slaves included, by broker id)."""
    obj: dict[str, Any] = {
        "brokerDatas": [
            {
                "brokerAddrs": {str(bid): addr for bid, addr in sorted(b.brokerAddrs.items())},
                "brokerName": b.brokerName,
                "cluster": b.cluster,
            }
            for b in route.brokerDatas
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": q.brokerName,
                "perm": q.perm,
                "readQueueNums": q.readQueueNums,
                "topicSynFlag": q.topicSysFlag,
                "topicSysFlag": q.topicSysFlag,
                "writeQueueNums": q.writeQueueNums,
            }
            for q in route.queueDatas
        ],
    }
    return json.dumps(obj, separators=(",", ":")).encode()
