"""Consumer groups as the broker sees them: members, their channels and subscriptions.

Members come and go by HEART_BEAT, UNREGISTER_CLIENT, a closed channel, or silence for
longer than the channel expiry (120 s). Every change is pushed to the remaining members
as NOTIFY_CONSUMER_IDS_CHANGED so they rebalance at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pymq.logs import get_logger
from pymq.protocol.filter import Subscription
from pymq.transport.channel import Channel

if TYPE_CHECKING:
    from pymq.config import BrokerConfig

log = get_logger("broker.consumers")


@dataclass
class ClientChannel:
    """One client of a group and the channel it heartbeats on."""

    client_id: str
    channel: Channel
    last_update: float
    language: str = "PYTHON"
    version: int = 0
    #: how the client reaches pymq: "pymq" (native frames), "remoting" (RocketMQ 4.x), "grpc" (5.x, through the proxy)
    protocol: str = "pymq"

    @property
    def addr(self) -> str:
        return self.channel.remote_addr


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    channels: dict[str, ClientChannel] = field(default_factory=dict)
    last_update: float = 0.0

    def client_ids(self) -> list[str]:
        return sorted(self.channels)


class ConsumerManager:
    def __init__(
        self,
        *,
        expiry_seconds: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        notify: Callable[[str, list[ClientChannel]], None] | None = None,
    ) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        #: producer group -> client id -> channel (for connection listings)
        self.producers: dict[str, dict[str, ClientChannel]] = {}
        self.expiry_seconds = expiry_seconds
        self.clock = clock
        #: notify(group, channels) pushes NOTIFY_CONSUMER_IDS_CHANGED (set by the broker)
        self.notify = notify
        #: (group, topic, queueId) -> client id of the last consumer that pulled it
        self.pull_owners: dict[tuple[str, str, int], str] = {}

    def note_pull_owner(self, group: str, topic: str, queue_id: int, client_id: str) -> None:
        """``client_id`` pulled the queue last: who pulls a queue is who owns it (consumer progress)."""
        self.pull_owners[(group, topic, queue_id)] = client_id

    def pull_owner(self, group: str, topic: str, queue_id: int) -> str | None:
        return self.pull_owners.get((group, topic, queue_id))

    def configure(self, config: BrokerConfig) -> None:
        """Follow the live broker config (see :class:`~pymq.broker.runtime_config.RuntimeConfig`)."""
        self.expiry_seconds = config.client_channel_expiry_seconds

    def register(
        self,
        group: str,
        client_id: str,
        channel: Channel,
        *,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: list[Subscription],
        language: str = "PYTHON",
        version: int = 0,
        protocol: str = "pymq",
    ) -> bool:
        """Record a consumer's heartbeat; True if the group's membership changed."""
        now = self.clock()
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type = consume_type
        info.message_model = message_model
        info.consume_from_where = consume_from_where
        info.last_update = now
        # Subscriptions follow the latest heartbeat, like RocketMQ: members should agree.
        new_subs = {s.topic: s for s in subscriptions}
        if new_subs != info.subscriptions:
            info.subscriptions = new_subs
        ch = info.channels.get(client_id)
        changed = ch is None or ch.channel is not channel
        if ch is None or ch.channel is not channel:
            info.channels[client_id] = ClientChannel(client_id, channel, now, language, version, protocol)
            log.info("consumer_registered", group=group, client_id=client_id, peer=channel.remote_addr)
        else:
            ch.last_update = now
        if changed:
            self._notify(info)
        return changed

    def register_producer(
        self,
        group: str,
        client_id: str,
        channel: Channel,
        *,
        language: str = "PYTHON",
        version: int = 0,
        protocol: str = "pymq",
    ) -> None:
        chans = self.producers.setdefault(group, {})
        ch = chans.get(client_id)
        if ch is None or ch.channel is not channel:
            chans[client_id] = ClientChannel(client_id, channel, self.clock(), language, version, protocol)
        else:
            ch.last_update = self.clock()

    def producer_table(self) -> dict[str, list[dict[str, Any]]]:
        """Every producer group's connected clients (GET_ALL_PRODUCER_INFO)."""
        return {
            group: [
                {
                    "clientId": ch.client_id,
                    "clientAddr": ch.addr,
                    "language": ch.language,
                    "version": ch.version,
                    "protocol": ch.protocol,
                }
                for ch in sorted(chans.values(), key=lambda c: c.client_id)
            ]
            for group, chans in sorted(self.producers.items())
        }

    def producer_channels(self, group: str) -> list[ClientChannel]:
        """The live producers of ``group`` (transaction check-backs pick one)."""
        chans = self.producers.get(group)
        return list(chans.values()) if chans else []

    def unregister(self, group: str, client_id: str) -> bool:
        info = self.groups.get(group)
        if info is None or client_id not in info.channels:
            return False
        del info.channels[client_id]
        log.info("consumer_unregistered", group=group, client_id=client_id)
        self._after_removal(info)
        return True

    def unregister_producer(self, group: str, client_id: str) -> None:
        chans = self.producers.get(group)
        if chans is not None:
            chans.pop(client_id, None)
            if not chans:
                del self.producers[group]

    def channel_closed(self, channel: Channel) -> None:
        for info in list(self.groups.values()):
            gone = [cid for cid, ch in info.channels.items() if ch.channel is channel]
            for cid in gone:
                del info.channels[cid]
                log.info("consumer_channel_closed", group=info.group, client_id=cid)
            if gone:
                self._after_removal(info)
        for group, chans in list(self.producers.items()):
            for cid in [c for c, ch in chans.items() if ch.channel is channel]:
                del chans[cid]
            if not chans:
                del self.producers[group]

    def scan_expired(self) -> list[tuple[str, str]]:
        deadline = self.clock() - self.expiry_seconds
        removed = []
        for info in list(self.groups.values()):
            gone = [cid for cid, ch in info.channels.items() if ch.last_update < deadline]
            for cid in gone:
                ch = info.channels.pop(cid)
                removed.append((info.group, cid))
                log.warning("consumer_expired", group=info.group, client_id=cid)
                ch.channel.close()
            if gone:
                self._after_removal(info)
        for _group, chans in list(self.producers.items()):
            for cid in [c for c, ch in chans.items() if ch.last_update < deadline]:
                del chans[cid]
        return removed

    def _after_removal(self, info: ConsumerGroupInfo) -> None:
        if info.channels:
            self._notify(info)
        else:
            # Keep nothing for an empty group; its subscriptions go with its last member.
            del self.groups[info.group]

    def _notify(self, info: ConsumerGroupInfo) -> None:
        if self.notify is not None and info.channels:
            self.notify(info.group, list(info.channels.values()))

    def client_ids(self, group: str) -> list[str]:
        info = self.groups.get(group)
        return info.client_ids() if info else []

    def channels_of(self, group: str) -> list[ClientChannel]:
        """The group's connected consumers (empty if none)."""
        info = self.groups.get(group)
        return list(info.channels.values()) if info else []

    def subscribed_topics(self, group: str) -> list[str]:
        """The topics the group's consumers subscribe to (as their heartbeats said)."""
        info = self.groups.get(group)
        return list(info.subscriptions) if info else []

    def subscription_expression(self, group: str, topic: str) -> str | None:
        """The tag expression of the group's subscription to ``topic`` (None: no consumer of it registered)."""
        info = self.groups.get(group)
        sub = info.subscriptions.get(topic) if info else None
        return sub.expression if sub is not None else None

    def find_channel(self, group: str, client_id: str) -> ClientChannel | None:
        info = self.groups.get(group)
        return info.channels.get(client_id) if info else None

    def groups_subscribing(self, topic: str) -> list[str]:
        return sorted(g for g, info in self.groups.items() if topic in info.subscriptions)

    def connection_info(self, group: str) -> dict[str, Any] | None:
        info = self.groups.get(group)
        if info is None:
            return None
        return {
            "group": group,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "consumeFromWhere": info.consume_from_where,
            "subscriptions": [s.to_dict() for s in info.subscriptions.values()],
            "connections": [
                {
                    "clientId": ch.client_id,
                    "clientAddr": ch.addr,
                    "language": ch.language,
                    "version": ch.version,
                    "protocol": ch.protocol,
                }
                for ch in sorted(info.channels.values(), key=lambda c: c.client_id)
            ],
        }
