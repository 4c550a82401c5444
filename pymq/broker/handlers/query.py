"""QUERY_MESSAGE (by key or unique id) and VIEW_MESSAGE_BY_ID (by commitlog offset)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import get_int, get_str
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp
    from pymq.transport.connection import Connection


class QueryHandlers:
    def __init__(self, app: BrokerApp) -> None:
        self.app = app

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
        }

    def query_message(self, cmd: Command, conn: Connection) -> Command:
        ext = cmd.ext
        records = self.app.store.query_by_key(
            get_str(ext, "topic"),
            get_str(ext, "key"),
            max(1, min(get_int(ext, "maxNum", 32), 1000)),
            get_int(ext, "beginTimestamp", 0),
            get_int(ext, "endTimestamp", 2**62),
        )
        if not records:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "no message found for this key")
        return cmd.response(body=records)

    def view_message(self, cmd: Command, conn: Connection) -> Command:
        offset = get_int(cmd.ext, "offset")
        rec = self.app.store.read_record(offset)
        if rec is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"no message at commitlog offset {offset}")
        return cmd.response(body=rec)
