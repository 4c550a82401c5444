"""Nameserver request handlers: one function per request code, all synchronous (but a route lookup
that creates its topic, in pymq-local)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pymq.errors import InvalidRequestError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import RegisterBrokerRequest, RegisterBrokerResponse, TopicRequest, UnregisterBrokerRequest
from pymq.protocol.route import TopicConfig, TopicRouteData
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.nameserver.registry import RouteRegistry

log = get_logger("namesrv")

#: a route as one wire format's response body
RouteBody = Callable[[TopicRouteData], bytes]


def _route_body(route: TopicRouteData) -> bytes:
    return encode_body(route.to_dict())


class NamesrvHandlers:
    def __init__(self, registry: RouteRegistry) -> None:
        self.registry = registry
        #: asked for a route of an unknown topic: creates it and answers whether it did (pymq-local's
        #: "topics are created on first use", for consumers as for producers); None: TOPIC_NOT_EXIST
        self.create_unknown_topic: Callable[[str], Awaitable[bool]] | None = None

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PING: lambda cmd, channel: cmd.response(),
        }

    def register_broker(self, cmd: Command, channel: Channel) -> Command:
        h = RegisterBrokerRequest.from_ext(cmd.ext)
        addr, broker_name, cluster, broker_id = h.broker_addr, h.broker_name, h.cluster_name, h.broker_id
        configs = None
        version: Any = None
        if len(cmd.body):
            body = decode_body(cmd.body, "registration body")
            try:
                configs = {n: TopicConfig.from_dict(d) for n, d in body.get("topicConfigTable", {}).items()}
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise InvalidRequestError(f"bad topic config in registration: {exc}") from exc
            version = body.get("dataVersion")
            if isinstance(version, dict):
                version = (version.get("timestamp"), version.get("counter"))
        first = addr not in self.registry.live
        result = self.registry.register_broker(
            cluster,
            addr,
            broker_name,
            broker_id,
            ha_server_addr=h.ha_server_addr,
            topic_configs=configs,
            data_version=version,
        )
        if first:
            log.info("broker_registered", broker=broker_name, broker_id=broker_id, addr=addr, cluster=cluster)
        # A closed channel removes the broker at once, as RocketMQ does.
        if channel.attrs.get("broker_addr") != addr:
            channel.attrs["broker_addr"] = addr
            channel.add_close_callback(self._channel_closed)
        answer = RegisterBrokerResponse(master_addr=result.master_addr, ha_server_addr=result.ha_server_addr)
        return cmd.response(ext=answer.to_ext())

    def _channel_closed(self, channel: Channel) -> None:
        addr = channel.attrs.get("broker_addr")
        if addr and self.registry.remove_addr(addr):
            log.info("broker_channel_closed", addr=addr)

    def unregister_broker(self, cmd: Command, channel: Channel) -> Command:
        h = UnregisterBrokerRequest.from_ext(cmd.ext)
        self.registry.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        channel.attrs.pop("broker_addr", None)
        log.info("broker_unregistered", addr=h.broker_addr, broker=h.broker_name)
        return cmd.response()

    def get_route(self, cmd: Command, channel: Channel) -> Command | Awaitable[Command]:
        return self.answer_route(cmd, _route_body)

    def answer_route(self, cmd: Command, body: RouteBody) -> Command | Awaitable[Command]:
        """The route of the request's ``topic``, its body made by ``body`` (one per wire format)."""
        topic = TopicRequest.from_ext(cmd.ext).topic
        route = self.registry.route(topic)
        if route is None:
            if self.create_unknown_topic is not None:
                return self._create_then_route(cmd, topic, body)
            return self._no_route(cmd, topic)
        return cmd.response(body=body(route))

    async def _create_then_route(self, cmd: Command, topic: str, body: RouteBody) -> Command:
        assert self.create_unknown_topic is not None
        if await self.create_unknown_topic(topic):
            route = self.registry.route(topic)
            if route is not None:
                return cmd.response(body=body(route))
        return self._no_route(cmd, topic)

    @staticmethod
    def _no_route(cmd: Command, topic: str) -> Command:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}")

    def cluster_info(self, cmd: Command, channel: Channel) -> Command:
        return cmd.response(body=encode_body(self.registry.cluster_info()))

    def topic_list(self, cmd: Command, channel: Channel) -> Command:
        return cmd.response(body=encode_body({"topicList": self.registry.topics()}))

    def delete_topic(self, cmd: Command, channel: Channel) -> Command:
        self.registry.delete_topic(TopicRequest.from_ext(cmd.ext).topic)
        return cmd.response()
