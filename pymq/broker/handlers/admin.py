"""Administration: topics, subscription groups, broker config, runtime info, connections."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pymq.broker.store.config_writer import Durable
from pymq.broker.subscription_groups import SubscriptionGroupConfig
from pymq.broker.topics import validate_topic_name
from pymq.errors import InvalidRequestError, RemoteError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import (
    ConsumerGroupRequest,
    CreateTopicRequest,
    DeleteSubscriptionGroupRequest,
    TopicRequest,
)
from pymq.protocol.route import TopicConfig, parse_attributes
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.consumers import ConsumerManager
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.runtime_config import RuntimeConfig
    from pymq.broker.store import MessageStore
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager


def answer_when_durable(answer: Command, what: str) -> tuple[Durable, asyncio.Future[Command]]:
    """A config writer's ``on_durable`` hook and the future the handler returns: the request is
    answered once the change is on disk (written off the loop, coalesced with others), or with
    SYSTEM_ERROR naming the failure."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Command] = loop.create_future()

    def settle(error: Exception | None) -> None:
        if fut.done():
            return
        if error is None:
            fut.set_result(answer)
        else:
            fut.set_exception(RemoteError(ResponseCode.SYSTEM_ERROR, f"{what} not written: {error}"))

    def on_durable(error: Exception | None) -> None:  # on the writer thread
        loop.call_soon_threadsafe(settle, error)

    return on_durable, fut


class AdminHandlers:
    def __init__(
        self,
        *,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        subscription_groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        runtime: RuntimeConfig,
        runtime_info: Callable[[], dict[str, Any]],
        address: str,
        topic_traffic: Callable[[], dict[str, list[int]]] = dict,
    ) -> None:
        self.topic_traffic = topic_traffic
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.subscription_groups = subscription_groups
        self.consumers = consumers
        self.runtime = runtime
        self.runtime_info_source = runtime_info
        self.address = address

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
            RequestCode.GET_ALL_PRODUCER_INFO: self.producers,
            RequestCode.GET_TOPIC_TRAFFIC: lambda cmd, channel: cmd.response(
                body=encode_body({"topics": self.topic_traffic()})
            ),
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_config,
            RequestCode.GET_BROKER_CONFIG: self.get_config,
            RequestCode.PING: lambda cmd, channel: cmd.response(),
        }

    def create_topic(self, cmd: Command, channel: Channel) -> Command | asyncio.Future[Command]:
        h = CreateTopicRequest.from_ext(cmd.ext)
        config = self.runtime.config
        validate_topic_name(h.topic, config.store.max_topic_length)
        n = config.default_topic_queue_nums
        tc = TopicConfig(
            topicName=h.topic,
            readQueueNums=n if h.read_queue_nums is None else h.read_queue_nums,
            writeQueueNums=n if h.write_queue_nums is None else h.write_queue_nums,
            perm=h.perm,
            topicFilterType=h.topic_filter_type,
            topicSysFlag=h.topic_sys_flag,
            order=h.order,
        )
        try:
            tc.attributes = parse_attributes(h.attributes)
        except ValueError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"header field 'attributes': {exc}")
        on_durable, answered = answer_when_durable(cmd.response(body=encode_body(tc.to_dict())), "topic config")
        self.topics.upsert(tc, on_durable)
        return answered

    def delete_topic(self, cmd: Command, channel: Channel) -> Command | asyncio.Future[Command]:
        topic = TopicRequest.from_ext(cmd.ext).topic
        on_durable, answered = answer_when_durable(cmd.response(), "topic config")
        if not self.topics.delete(topic, on_durable):
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {self.address}")
        self.store.delete_topic(topic)
        self.offsets.delete_topic(topic)
        return answered

    def all_topics(self, cmd: Command, channel: Channel) -> Command:
        t = self.topics
        return cmd.response(body=encode_body({"topicConfigTable": t.table(), "dataVersion": t.data_version}))

    def topic_stats(self, cmd: Command, channel: Channel) -> Command:
        store = self.store
        topic = TopicRequest.from_ext(cmd.ext).topic
        tc = self.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {self.address}")
        rows = []
        for qid in range(max(tc.readQueueNums, tc.writeQueueNums)):
            lo, hi = store.min_offset(topic, qid), store.max_offset(topic, qid)
            rows.append(
                {
                    "brokerName": self.runtime.config.broker_name,
                    "queueId": qid,
                    "minOffset": lo,
                    "maxOffset": hi,
                    "lastUpdateTimestamp": store.store_time_at(topic, qid, hi - 1) if hi > lo else 0,
                }
            )
        return cmd.response(body=encode_body({"offsetTable": rows}))

    def update_group(self, cmd: Command, channel: Channel) -> asyncio.Future[Command]:
        body = decode_body(cmd.body, "subscription group config")
        if not isinstance(body, dict):
            raise InvalidRequestError("subscription group config must be a map")
        cfg = SubscriptionGroupConfig.from_dict(body)
        on_durable, answered = answer_when_durable(cmd.response(body=encode_body(cfg.to_dict())), "group config")
        self.subscription_groups.upsert(cfg, on_durable)
        return answered

    def all_groups(self, cmd: Command, channel: Channel) -> Command:
        return cmd.response(body=encode_body({"subscriptionGroupTable": self.subscription_groups.table()}))

    def delete_group(self, cmd: Command, channel: Channel) -> Command | asyncio.Future[Command]:
        group = DeleteSubscriptionGroupRequest.from_ext(cmd.ext).group_name
        on_durable, answered = answer_when_durable(cmd.response(), "group config")
        if not self.subscription_groups.delete(group, on_durable):
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} does not exist")
        return answered

    def consumer_connections(self, cmd: Command, channel: Channel) -> Command:
        group = ConsumerGroupRequest.from_ext(cmd.ext).consumer_group
        info = self.consumers.connection_info(group)
        if info is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} is connected")
        return cmd.response(body=encode_body(info))

    def producers(self, cmd: Command, channel: Channel) -> Command:
        return cmd.response(body=encode_body({"producerTable": self.consumers.producer_table()}))

    def runtime_info(self, cmd: Command, channel: Channel) -> Command:
        return cmd.response(body=encode_body(self.runtime_info_source()))

    def update_config(self, cmd: Command, channel: Channel) -> Command:
        body = decode_body(cmd.body, "broker config")
        if not isinstance(body, dict):
            raise InvalidRequestError("broker config update must be a map of setting -> value")
        changed = self.runtime.update(body)
        return cmd.response(body=encode_body(changed))

    def get_config(self, cmd: Command, channel: Channel) -> Command:
        data: dict[str, Any] = self.runtime.config.model_dump(mode="json")
        return cmd.response(body=encode_body(data))
