"""HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.filter import Subscription
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import ConsumerGroupRequest, UnregisterClientRequest, retry_topic
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.consumers import ConsumerManager
    from pymq.broker.role.state import RoleMachine
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager


class ClientHandlers:
    def __init__(
        self,
        *,
        consumers: ConsumerManager,
        subscription_groups: SubscriptionGroupManager,
        topics: TopicConfigManager,
        role: RoleMachine,
    ) -> None:
        self.consumers = consumers
        self.subscription_groups = subscription_groups
        self.topics = topics
        #: masters create a clustering group's retry topic at its first heartbeat; slaves create no topics
        self.role = role

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
        }

    def heartbeat(self, cmd: Command, channel: Channel) -> Command:
        consumers = self.consumers
        body = decode_body(cmd.body, "heartbeat")
        if not isinstance(body, dict) or not isinstance(body.get("clientID"), str):
            raise InvalidRequestError("heartbeat body needs a clientID")
        client_id = body["clientID"]
        if "client_id" not in channel.attrs:
            channel.attrs["client_id"] = client_id
            # A closed channel removes its client at once (no waiting for the 120 s expiry).
            channel.add_close_callback(consumers.channel_closed)
        try:
            language, version = str(body.get("language", "PYTHON")), int(body.get("version", 0))
            # the body's word first (a proxy heartbeats for its clients on its own connection), then the channel's
            protocol = str(body.get("protocol") or channel.attrs.get("protocol") or "pymq")
            for p in body.get("producerDataSet") or []:
                consumers.register_producer(
                    str(p["groupName"]), client_id, channel, language=language, version=version, protocol=protocol
                )
            for c in body.get("consumerDataSet") or []:
                group = str(c["groupName"])
                sg = self.subscription_groups.get(group)
                model = str(c.get("messageModel", "CLUSTERING"))
                if sg is not None and model == "CLUSTERING" and self.role.current.writable:
                    # The retry topic exists before anyone needs its route.
                    self.topics.ensure_system_topic(retry_topic(group), sg.retryQueueNums)
                subs = [Subscription.from_dict(s) for s in c.get("subscriptionDataSet") or []]
                consumers.register(
                    group,
                    client_id,
                    channel,
                    consume_type=str(c.get("consumeType", "CONSUME_PASSIVELY")),
                    message_model=model,
                    consume_from_where=str(c.get("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET")),
                    subscriptions=subs,
                    language=language,
                    version=version,
                    protocol=protocol,
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"bad heartbeat body: {exc}") from exc
        return cmd.response()

    def unregister(self, cmd: Command, channel: Channel) -> Command:
        h = UnregisterClientRequest.from_ext(cmd.ext)
        if h.consumer_group:
            self.consumers.unregister(h.consumer_group, h.client_id)
        if h.producer_group:
            self.consumers.unregister_producer(h.producer_group, h.client_id)
        return cmd.response()

    def consumer_list(self, cmd: Command, channel: Channel) -> Command:
        group = ConsumerGroupRequest.from_ext(cmd.ext).consumer_group
        ids = self.consumers.client_ids(group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} is connected")
        return cmd.response(body=encode_body({"consumerIdList": ids}))
