"""END_TRANSACTION (oneway, from producers) and GET_PENDING_HALF_MESSAGES (admin)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import EndTransactionRequest, PendingHalfMessagesRequest
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.transaction.service import TransactionalMessageService

log = get_logger("broker.transactions")
debug_enabled = partial(log.stdlib.isEnabledFor, logging.DEBUG)


class TransactionHandlers:
    def __init__(self, *, transactions: Callable[[], TransactionalMessageService]) -> None:
        #: the broker's current transaction service (a role change makes a new one: read it per request)
        self.transactions = transactions

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.GET_PENDING_HALF_MESSAGES: self.pending,
        }

    def end_transaction(self, cmd: Command, channel: Channel) -> Command | None:
        h = EndTransactionRequest.from_ext(cmd.ext)
        outcome = self.transactions().end_transaction(h)
        if debug_enabled():  # (its fields are built only when someone reads them: this runs per transaction)
            log.debug(
                "end_transaction",
                outcome=outcome,
                group=h.producer_group,
                msg_id=h.msg_id,
                from_check=h.from_transaction_check,
                peer=channel.remote_addr,
            )
        # Oneway, as in RocketMQ; a caller that asked for an answer gets one.
        return None if cmd.is_oneway else cmd.response(remark=outcome)

    def pending(self, cmd: Command, channel: Channel) -> Command:
        h = PendingHalfMessagesRequest.from_ext(cmd.ext)
        service = self.transactions()
        rows = service.pending(h.producer_group, h.max_num)
        return cmd.response(body=encode_body({"pending": rows, **service.state()}))
