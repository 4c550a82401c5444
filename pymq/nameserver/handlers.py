"""Nameserver request handlers: one function per request code, all synchronous."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pymq.errors import InvalidRequestError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body, encode_body, get_int, get_str
from pymq.protocol.route import TopicConfig
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.nameserver.registry import RouteRegistry
    from pymq.transport.connection import Connection

log = get_logger("namesrv")


class NamesrvHandlers:
    def __init__(self, registry: RouteRegistry) -> None:
        self.registry = registry

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PING: lambda cmd, conn: cmd.response(),
        }

    def register_broker(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        addr = get_str(ext, "brokerAddr")
        broker_name = get_str(ext, "brokerName")
        cluster = get_str(ext, "clusterName")
        broker_id = get_int(ext, "brokerId")
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
            ha_server_addr=get_str(ext, "haServerAddr", ""),
            topic_configs=configs,
            data_version=version,
        )
        if first:
            log.info("broker_registered", broker=broker_name, broker_id=broker_id, addr=addr, cluster=cluster)
        # A closed channel removes the broker at once, as RocketMQ does.
        if conn.attrs.get("broker_addr") != addr:
            conn.attrs["broker_addr"] = addr
            conn.add_close_callback(self._channel_closed)
        return cmd.response(ext={"masterAddr": result.master_addr, "haServerAddr": result.ha_server_addr})

    def _channel_closed(self, conn: Connection) -> None:
        addr = conn.attrs.get("broker_addr")
        if addr and self.registry.remove_addr(addr):
            log.info("broker_channel_closed", addr=addr)

    def unregister_broker(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        addr = get_str(ext, "brokerAddr")
        self.registry.unregister_broker(
            get_str(ext, "clusterName"), addr, get_str(ext, "brokerName"), get_int(ext, "brokerId")
        )
        conn.attrs.pop("broker_addr", None)
        log.info("broker_unregistered", addr=addr, broker=ext.get("brokerName"))
        return cmd.response()

    def get_route(self, cmd: Command, conn: Connection) -> Command:
        topic = get_str(cmd.ext, "topic")
        route = self.registry.route(topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
            )
        return cmd.response(body=encode_body(route.to_dict()))

    def cluster_info(self, cmd: Command, conn: Connection) -> Command:
        return cmd.response(body=encode_body(self.registry.cluster_info()))

    def topic_list(self, cmd: Command, conn: Connection) -> Command:
        return cmd.response(body=encode_body({"topicList": self.registry.topics()}))

    def delete_topic(self, cmd: Command, conn: Connection) -> Command:
        self.registry.delete_topic(get_str(cmd.ext, "topic"))
        return cmd.response()
