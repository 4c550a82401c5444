"""LOCK_BATCH_MQ and UNLOCK_BATCH_MQ for orderly consumers (masters only: a slave's role
interceptor refuses LOCK_BATCH_MQ, see :mod:`pymq.broker.role.gate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import LOCK_OK_MQ_SET, LockBatchBody
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.locks import QueueLockManager


class LockHandlers:
    def __init__(self, *, locks: QueueLockManager) -> None:
        self.locks = locks

    def table(self) -> dict[int, Handler]:
        return {RequestCode.LOCK_BATCH_MQ: self.lock, RequestCode.UNLOCK_BATCH_MQ: self.unlock}

    def lock(self, cmd: Command, channel: Channel) -> Command:
        req = LockBatchBody.from_body(decode_body(cmd.body, "lock body"))
        locked = self.locks.try_lock_batch(req.consumer_group, req.mq_set, req.client_id)
        return cmd.response(body=encode_body({LOCK_OK_MQ_SET: [mq.to_dict() for mq in sorted(locked)]}))

    def unlock(self, cmd: Command, channel: Channel) -> Command:
        req = LockBatchBody.from_body(decode_body(cmd.body, "unlock body"))
        self.locks.unlock_batch(req.consumer_group, req.mq_set, req.client_id)
        return cmd.response()
