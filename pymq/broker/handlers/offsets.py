"""Offsets: committed consumer offsets, queue min/max, search by time, consume stats and resets."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import (
    ConsumeStatsRequest,
    OffsetResponse,
    QueryConsumerOffsetRequest,
    QueryQueueOffsetsRequest,
    QueueOffsetRequest,
    ResetOffsetRequest,
    SearchOffsetRequest,
    StoreTimeResponse,
    UpdateConsumerOffsetRequest,
)
from pymq.protocol.requests_many import read_queues
from pymq.protocol.route import MessageQueue
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.consumers import ConsumerManager
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.store import MessageStore
    from pymq.broker.topics import TopicConfigManager


class OffsetHandlers:
    def __init__(
        self,
        *,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        topics: TopicConfigManager,
        consumers: ConsumerManager,
        broker_name: str,
        address: str,
        inflight: Callable[[str], dict[tuple[str, int], int] | None] | None = None,
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.topics = topics
        self.consumers = consumers
        self.broker_name = broker_name
        self.address = address
        #: group -> (topic, queue) -> popped messages not acked yet (pop consumption; None while not master)
        self.inflight = inflight

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_by_time,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.RESET_CONSUMER_OFFSET: self.reset_offset,
            RequestCode.QUERY_QUEUE_OFFSETS: self.query_queue_offsets,
        }

    def query_consumer_offset(self, cmd: Command, channel: Channel) -> Command:
        h = QueryConsumerOffsetRequest.from_ext(cmd.ext)
        offset = self.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset < 0:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "no committed offset for this group and queue")
        return cmd.response(ext=OffsetResponse(offset=offset).to_ext())

    def query_queue_offsets(self, cmd: Command, channel: Channel) -> Command:
        """Committed, min, max (and by-time) offsets of many queues: a rebalance's one round trip (issue 36)."""
        h = QueryQueueOffsetsRequest.from_ext(cmd.ext)
        store, group, ts = self.store, h.consumer_group, h.timestamp
        rows = []
        for topic, qid, _ in read_queues(cmd.body, with_offset=False):
            by_time = store.offset_by_time(topic, qid, ts) if ts is not None else -1
            committed = self.offsets.query(group, topic, qid)
            rows.append([committed, store.min_offset(topic, qid), store.max_offset(topic, qid), by_time])
        return cmd.response(body=encode_body({"offsets": rows}))

    def update_consumer_offset(self, cmd: Command, channel: Channel) -> Command:
        # A slave never gets here: its role interceptor accepts and drops the commit.
        h = UpdateConsumerOffsetRequest.from_ext(cmd.ext)
        self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response()

    def max_offset(self, cmd: Command, channel: Channel) -> Command:
        h = QueueOffsetRequest.from_ext(cmd.ext)
        return cmd.response(ext=OffsetResponse(offset=self.store.max_offset(h.topic, h.queue_id)).to_ext())

    def min_offset(self, cmd: Command, channel: Channel) -> Command:
        h = QueueOffsetRequest.from_ext(cmd.ext)
        return cmd.response(ext=OffsetResponse(offset=self.store.min_offset(h.topic, h.queue_id)).to_ext())

    def search_by_time(self, cmd: Command, channel: Channel) -> Command:
        h = SearchOffsetRequest.from_ext(cmd.ext)
        offset = self.store.offset_by_time(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ext=OffsetResponse(offset=offset).to_ext())

    def earliest_store_time(self, cmd: Command, channel: Channel) -> Command:
        h = QueueOffsetRequest.from_ext(cmd.ext)
        ts = self.store.store_time_at(h.topic, h.queue_id, self.store.min_offset(h.topic, h.queue_id))
        return cmd.response(ext=StoreTimeResponse(timestamp=ts).to_ext())

    def all_consumer_offsets(self, cmd: Command, channel: Channel) -> Command:
        return cmd.response(body=encode_body({"offsetTable": self.offsets.wire_table()}))

    def consume_stats(self, cmd: Command, channel: Channel) -> Command:
        """Per queue of the group's topics on this broker: broker max offset, consumer offset, last store time."""
        store, consumers = self.store, self.consumers
        h = ConsumeStatsRequest.from_ext(cmd.ext)
        group = h.consumer_group
        topics = (
            [h.topic]
            if h.topic
            else sorted(set(self.offsets.topics_of_group(group)) | set(consumers.subscribed_topics(group)))
        )
        rows = []
        inflight = self.inflight(group) if self.inflight is not None else None
        for topic in topics:
            tc = self.topics.get(topic)
            if tc is None:
                continue
            committed = self.offsets.offsets_of(group, topic)
            for qid in range(tc.readQueueNums):
                max_off = store.max_offset(topic, qid)
                consumer = committed.get(qid, -1)
                last_ts = store.store_time_at(topic, qid, max_off - 1) if max_off > 0 else 0
                owner = consumers.pull_owner(group, topic, qid)
                if owner is not None and consumers.find_channel(group, owner) is None:
                    owner = None  # the last puller has left the group
                rows.append(
                    {
                        "topic": topic,
                        "brokerName": self.broker_name,
                        "queueId": qid,
                        "brokerOffset": max_off,
                        "minOffset": store.min_offset(topic, qid),
                        "consumerOffset": consumer,
                        "lastTimestamp": last_ts,
                        "clientId": owner,
                    }
                )
                if inflight is not None:
                    rows[-1]["inFlight"] = inflight.get((topic, qid), 0)
        return cmd.response(body=encode_body({"offsetTable": rows}))

    def reset_offset(self, cmd: Command, channel: Channel) -> Command:
        """Commit the offsets found by ``timestamp`` for every queue and tell the group's clients at once."""
        store = self.store
        h = ResetOffsetRequest.from_ext(cmd.ext)
        group, topic, ts = h.group, h.topic, h.timestamp
        tc = self.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {self.address}")
        table = {}
        for qid in range(tc.readQueueNums):
            if ts < 0:  # -1: latest, -2: earliest
                off = store.max_offset(topic, qid) if ts == -1 else store.min_offset(topic, qid)
            else:
                off = store.offset_by_time(topic, qid, ts)
            self.offsets.commit(group, topic, qid, off)
            table[qid] = off
        self.offsets.persist()
        push_ext = ResetOffsetRequest(group=group, topic=topic, timestamp=ts).to_ext()
        push_body = encode_body(
            {"offsetTable": [[MessageQueue(topic, self.broker_name, q).to_dict(), o] for q, o in table.items()]}
        )
        notified = 0
        for ch in self.consumers.channels_of(group):
            ch.channel.push_oneway(Command.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(push_ext), push_body))
            notified += 1
        return cmd.response(
            body=encode_body({"offsetTable": {str(q): o for q, o in table.items()}, "notified": notified})
        )
