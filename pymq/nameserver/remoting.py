"""The nameserver's answers to RocketMQ 4.x clients (remoting wire, issue 30).

Same registry, same rules as :mod:`pymq.nameserver.handlers`; only the bodies differ: the
fastjson-shaped JSON a 4.x client or ``mqadmin`` parses (TopicRouteData, ClusterInfo, TopicList).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from pymq.nameserver.handlers import NamesrvHandlers
from pymq.protocol.command import Command
from pymq.remoting.codes import RequestCode
from pymq.remoting.route_body import topic_route_body
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class RemotingNamesrvHandlers:
    """GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER for 4.x clients."""

    def __init__(self, native: NamesrvHandlers) -> None:
        self.native = native
        self.registry = native.registry

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
        }

    def get_route(self, cmd: Command, channel: Channel) -> Command | Awaitable[Command]:
        return self.native.answer_route(cmd, topic_route_body)

    def cluster_info(self, cmd: Command, channel: Channel) -> Command:
        # brokerAddrs keyed by the broker id as a string: json.dumps writes int keys that way
        return cmd.response(body=_json(self.registry.cluster_info()))

    def topic_list(self, cmd: Command, channel: Channel) -> Command:
        return cmd.response(body=_json({"topicList": self.registry.topics()}))
