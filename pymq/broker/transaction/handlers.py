"""END_TRANSACTION (oneway, from producers) and GET_PENDING_HALF_MESSAGES (admin)."""

from __future__ import annotations

import asyncio
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
    def __init__(
        self, *, transactions: Callable[[], TransactionalMessageService], writable: Callable[[], bool]
    ) -> None:
        #: the broker's current transaction service (a role change makes a new one: read it per request)
        self.transactions = transactions
        #: whether the broker takes writes now (the role gate refused the request otherwise; a
        #: deferred commit checks again: a fence or demotion may have come in between)
        self.writable = writable

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.GET_PENDING_HALF_MESSAGES: self.pending,
        }

    def end_transaction(self, cmd: Command, channel: Channel) -> Command | None:
        h = EndTransactionRequest.from_ext(cmd.ext)
        if cmd.is_oneway:  # as in RocketMQ
            # Applied once the answers to this read's other requests are out, as RocketMQ applies it
            # on an executor of its own: a producer sends its next half message right behind its
            # END_TRANSACTION (often in one write), and that answer need not wait for the commit's
            # two puts, which then overlap the producer's work. (No order is promised between a
            # oneway END_TRANSACTION and later requests, in RocketMQ either.)
            asyncio.get_running_loop().call_soon(self._end_later, h, channel)
            return None
        return cmd.response(remark=self._end(h, channel))  # a caller that asked for an answer gets one

    def _end_later(self, h: EndTransactionRequest, channel: Channel) -> None:
        """:meth:`_end` of a oneway END_TRANSACTION, in its own loop callback."""
        if not self.writable():  # fenced or demoted since it was read: the check-back resolves it
            log.warning("end_transaction_not_applied", reason="not a writable master", msg_id=h.msg_id)
            return
        try:
            self._end(h, channel)
        except Exception:  # (a scheduled callback: nothing above it would log this)
            log.exception("end_transaction_failed", group=h.producer_group, msg_id=h.msg_id)

    def _end(self, h: EndTransactionRequest, channel: Channel) -> str:
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
        return outcome

    def pending(self, cmd: Command, channel: Channel) -> Command:
        h = PendingHalfMessagesRequest.from_ext(cmd.ext)
        service = self.transactions()
        rows = service.pending(h.producer_group, h.max_num)
        return cmd.response(body=encode_body({"pending": rows, **service.state()}))
