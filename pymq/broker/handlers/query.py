"""QUERY_MESSAGE (by key or unique id) and VIEW_MESSAGE_BY_ID (by commitlog offset)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.requests import QueryMessageRequest, ViewMessageRequest
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.store import MessageStore


class QueryHandlers:
    def __init__(self, *, store: MessageStore) -> None:
        self.store = store

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
        }

    def query_message(self, cmd: Command, channel: Channel) -> Command:
        h = QueryMessageRequest.from_ext(cmd.ext)
        records = self.store.query_by_key(
            h.topic, h.key, max(1, min(h.max_num, 1000)), h.begin_timestamp, h.end_timestamp
        )
        if not records:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "no message found for this key")
        return cmd.response(body=records)

    def view_message(self, cmd: Command, channel: Channel) -> Command:
        offset = ViewMessageRequest.from_ext(cmd.ext).offset
        rec = self.store.read_record(offset)
        if rec is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"no message at commitlog offset {offset}")
        return cmd.response(body=rec)
