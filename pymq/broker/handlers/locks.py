"""LOCK_BATCH_MQ and UNLOCK_BATCH_MQ for orderly consumers (masters only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.route import MessageQueue
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp
    from pymq.transport.connection import Connection


def _parse(body: object) -> tuple[str, str, list[MessageQueue]]:
    if not isinstance(body, dict):
        raise InvalidRequestError("lock body must be a map")
    try:
        return (
            str(body["consumerGroup"]),
            str(body["clientId"]),
            [MessageQueue.from_dict(m) for m in body["mqSet"]],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRequestError(f"bad lock body: {exc}") from exc


class LockHandlers:
    def __init__(self, app: BrokerApp) -> None:
        self.app = app

    def table(self) -> dict[int, Handler]:
        return {RequestCode.LOCK_BATCH_MQ: self.lock, RequestCode.UNLOCK_BATCH_MQ: self.unlock}

    def lock(self, cmd: Command, conn: Connection) -> Command:
        if self.app.is_slave:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "queue locks live on the master")
        group, client_id, mqs = _parse(decode_body(cmd.body, "lock body"))
        locked = self.app.locks.try_lock_batch(group, mqs, client_id)
        return cmd.response(body=encode_body({"lockOKMQSet": [mq.to_dict() for mq in sorted(locked)]}))

    def unlock(self, cmd: Command, conn: Connection) -> Command:
        group, client_id, mqs = _parse(decode_body(cmd.body, "unlock body"))
        self.app.locks.unlock_batch(group, mqs, client_id)
        return cmd.response()
