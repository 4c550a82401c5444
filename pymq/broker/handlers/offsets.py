"""Offsets: committed consumer offsets, queue min/max, search by time, consume stats and resets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import encode_body, get_int, get_str
from pymq.protocol.route import MessageQueue
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp
    from pymq.transport.connection import Connection


class OffsetHandlers:
    def __init__(self, app: BrokerApp) -> None:
        self.app = app

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
        }

    def query_consumer_offset(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        offset = self.app.offsets.query(get_str(ext, "consumerGroup"), get_str(ext, "topic"), get_int(ext, "queueId"))
        if offset < 0:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "no committed offset for this group and queue")
        return cmd.response(ext={"offset": offset})

    def update_consumer_offset(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        if not self.app.is_slave:
            self.app.offsets.commit(
                get_str(ext, "consumerGroup"),
                get_str(ext, "topic"),
                get_int(ext, "queueId"),
                get_int(ext, "commitOffset"),
            )
        return cmd.response()

    def max_offset(self, cmd: Command, conn: Connection) -> Command:
        return cmd.response(
            ext={"offset": self.app.store.max_offset(get_str(cmd.ext, "topic"), get_int(cmd.ext, "queueId"))}
        )

    def min_offset(self, cmd: Command, conn: Connection) -> Command:
        return cmd.response(
            ext={"offset": self.app.store.min_offset(get_str(cmd.ext, "topic"), get_int(cmd.ext, "queueId"))}
        )

    def search_by_time(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        offset = self.app.store.offset_by_time(
            get_str(ext, "topic"), get_int(ext, "queueId"), get_int(ext, "timestamp")
        )
        return cmd.response(ext={"offset": offset})

    def earliest_store_time(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        topic, qid = get_str(ext, "topic"), get_int(ext, "queueId")
        ts = self.app.store.store_time_at(topic, qid, self.app.store.min_offset(topic, qid))
        return cmd.response(ext={"timestamp": ts})

    def all_consumer_offsets(self, cmd: Command, conn: Connection) -> Command:
        table = {k: {str(q): o for q, o in v.items()} for k, v in self.app.offsets.table.items()}
        return cmd.response(body=encode_body({"offsetTable": table}))

    def consume_stats(self, cmd: Command, conn: Connection) -> Command:
        """Per queue of the group's topics on this broker: broker max offset, consumer offset, last store time."""
        app = self.app
        group = get_str(cmd.ext, "consumerGroup")
        only_topic = cmd.ext.get("topic")
        topics = (
            [only_topic]
            if only_topic
            else sorted(
                set(app.offsets.topics_of_group(group))
                | set(getattr(app.consumers.groups.get(group), "subscriptions", {}) or {})
            )
        )
        rows = []
        for topic in topics:
            tc = app.topics.get(topic)
            if tc is None:
                continue
            committed = app.offsets.offsets_of(group, topic)
            for qid in range(tc.readQueueNums):
                max_off = app.store.max_offset(topic, qid)
                consumer = committed.get(qid, -1)
                last_ts = app.store.store_time_at(topic, qid, max_off - 1) if max_off > 0 else 0
                owner = app.pull_owners.get((group, topic, qid))
                if owner is not None and app.consumers.find_channel(group, owner) is None:
                    owner = None  # the last puller has left the group
                rows.append(
                    {
                        "topic": topic,
                        "brokerName": app.config.broker_name,
                        "queueId": qid,
                        "brokerOffset": max_off,
                        "minOffset": app.store.min_offset(topic, qid),
                        "consumerOffset": consumer,
                        "lastTimestamp": last_ts,
                        "clientId": owner,
                    }
                )
        return cmd.response(body=encode_body({"offsetTable": rows}))

    def reset_offset(self, cmd: Command, conn: Connection) -> Command:
        """Commit the offsets found by ``timestamp`` for every queue and tell the group's clients at once."""
        app = self.app
        ext = cmd.ext
        group, topic, ts = get_str(ext, "group"), get_str(ext, "topic"), get_int(ext, "timestamp")
        tc = app.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {app.address}")
        table = {}
        for qid in range(tc.readQueueNums):
            if ts < 0:  # -1: latest, -2: earliest
                off = app.store.max_offset(topic, qid) if ts == -1 else app.store.min_offset(topic, qid)
            else:
                off = app.store.offset_by_time(topic, qid, ts)
            app.offsets.commit(group, topic, qid, off)
            table[qid] = off
        app.offsets.persist()
        push = Command.request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            {"topic": topic, "group": group, "timestamp": ts},
            encode_body(
                {
                    "offsetTable": [
                        [MessageQueue(topic, app.config.broker_name, q).to_dict(), o] for q, o in table.items()
                    ]
                }
            ),
        )
        info = app.consumers.groups.get(group)
        notified = 0
        if info is not None:
            for ch in info.channels.values():
                ch.conn.push_oneway(Command(push.code, 0, 0, None, dict(push.ext), push.body))
                notified += 1
        return cmd.response(
            body=encode_body({"offsetTable": {str(q): o for q, o in table.items()}, "notified": notified})
        )
