"""Administration: topics, subscription groups, broker config, runtime info, connections."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pymq.broker.subscription_groups import SubscriptionGroupConfig
from pymq.broker.topics import validate_topic_name
from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body, encode_body, get_bool, get_int, get_str
from pymq.protocol.route import PERM_READ_WRITE, TopicConfig
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp
    from pymq.transport.connection import Connection


class AdminHandlers:
    def __init__(self, app: BrokerApp) -> None:
        self.app = app

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topics,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_config,
            RequestCode.GET_BROKER_CONFIG: self.get_config,
            RequestCode.PING: lambda cmd, conn: cmd.response(),
        }

    def create_topic(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        topic = get_str(ext, "topic")
        validate_topic_name(topic, self.app.config.store.max_topic_length)
        n = self.app.config.default_topic_queue_nums
        tc = TopicConfig(
            topicName=topic,
            readQueueNums=get_int(ext, "readQueueNums", n),
            writeQueueNums=get_int(ext, "writeQueueNums", n),
            perm=get_int(ext, "perm", PERM_READ_WRITE),
            topicFilterType=get_str(ext, "topicFilterType", "SINGLE_TAG"),
            topicSysFlag=get_int(ext, "topicSysFlag", 0),
            order=get_bool(ext, "order", False),
        )
        self.app.topics.upsert(tc)
        return cmd.response(body=encode_body(tc.to_dict()))

    def delete_topic(self, cmd: Command, conn: Connection) -> Command:
        topic = get_str(cmd.ext, "topic")
        if not self.app.topics.delete(topic):
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {self.app.address}")
        self.app.store.delete_topic(topic)
        self.app.offsets.delete_topic(topic)
        return cmd.response()

    def all_topics(self, cmd: Command, conn: Connection) -> Command:
        t = self.app.topics
        return cmd.response(body=encode_body({"topicConfigTable": t.table(), "dataVersion": t.data_version}))

    def topic_stats(self, cmd: Command, conn: Connection) -> Command:
        app = self.app
        topic = get_str(cmd.ext, "topic")
        tc = app.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {app.address}")
        rows = []
        for qid in range(max(tc.readQueueNums, tc.writeQueueNums)):
            lo, hi = app.store.min_offset(topic, qid), app.store.max_offset(topic, qid)
            rows.append(
                {
                    "brokerName": app.config.broker_name,
                    "queueId": qid,
                    "minOffset": lo,
                    "maxOffset": hi,
                    "lastUpdateTimestamp": app.store.store_time_at(topic, qid, hi - 1) if hi > lo else 0,
                }
            )
        return cmd.response(body=encode_body({"offsetTable": rows}))

    def update_group(self, cmd: Command, conn: Connection) -> Command:
        body = decode_body(cmd.body, "subscription group config")
        if not isinstance(body, dict):
            raise InvalidRequestError("subscription group config must be a map")
        cfg = SubscriptionGroupConfig.from_dict(body)
        self.app.subscription_groups.upsert(cfg)
        return cmd.response(body=encode_body(cfg.to_dict()))

    def all_groups(self, cmd: Command, conn: Connection) -> Command:
        groups = {n: g.to_dict() for n, g in self.app.subscription_groups.groups.items()}
        return cmd.response(body=encode_body({"subscriptionGroupTable": groups}))

    def delete_group(self, cmd: Command, conn: Connection) -> Command:
        group = get_str(cmd.ext, "groupName")
        if not self.app.subscription_groups.delete(group):
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} does not exist")
        return cmd.response()

    def consumer_connections(self, cmd: Command, conn: Connection) -> Command:
        group = get_str(cmd.ext, "consumerGroup")
        info = self.app.consumers.connection_info(group)
        if info is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} is connected")
        return cmd.response(body=encode_body(info))

    def runtime_info(self, cmd: Command, conn: Connection) -> Command:
        return cmd.response(body=encode_body(self.app.runtime_info()))

    def update_config(self, cmd: Command, conn: Connection) -> Command:
        body = decode_body(cmd.body, "broker config")
        if not isinstance(body, dict):
            raise InvalidRequestError("broker config update must be a map of setting -> value")
        changed = self.app.update_runtime_config(body)
        return cmd.response(body=encode_body(changed))

    def get_config(self, cmd: Command, conn: Connection) -> Command:
        data: dict[str, Any] = self.app.config.model_dump(mode="json")
        return cmd.response(body=encode_body(data))
