"""Check-back: ask a live producer about half messages that have waited too long for an outcome.

RocketMQ's TransactionalMessageCheckService, as a broker :class:`~pymq.broker.service.Service`.
Every ``transaction_check_interval_seconds`` it brings the waiting half messages up to date
(:meth:`TransactionalMessageService.waiting`: only what was stored since the last round is
read) and, for the latest copy of each unresolved message older than its timeout
(``transaction_timeout_seconds``, or the message's ``CHECK_IMMUNITY_TIME_IN_SECONDS``
before its first check):

* if it was checked ``transaction_check_max`` times already, it is stored in
  ``TRANS_CHECK_MAX_TIME_TOPIC`` and resolved (logged as ``transaction_discarded``);
* else it is put back at the half queue's end with one more check counted and a producer
  of its group (``PGROUP``), picked among the live connections that heartbeat that group,
  is sent CHECK_TRANSACTION_STATE (oneway, over the producer's own connection). The
  producer answers with END_TRANSACTION ``fromTransactionCheck=true`` for that copy. With
  no producer connected the check still counts, as in RocketMQ.

Then the scan and op positions move on and are persisted. Only masters check.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pymq.broker.transaction.service import HalfEntry, TransactionalMessageService
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.message import Prop
from pymq.protocol.record import offset_msg_id, pack_host
from pymq.protocol.requests import CheckTransactionStateRequest
from pymq.tasks import cancel_and_wait, wait_within

if TYPE_CHECKING:
    from pymq.broker.consumers import ClientChannel
    from pymq.config import BrokerConfig

log = get_logger("broker.transaction_check")


class TransactionCheckService:
    def __init__(
        self,
        service: TransactionalMessageService,
        config: BrokerConfig,
        producer_channels: Callable[[str], list[ClientChannel]],
        address: Callable[[], str],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.service = service
        self.config = config
        self.producer_channels = producer_channels
        self.address = address
        self.clock = clock
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        self._task.set_name("broker-transaction-check")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self.service.persist_if_changed()

    def trigger(self) -> None:
        """Run a check round now (tests, admin)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_within(self._wake.wait(), self.config.transaction_check_interval_seconds)
            self._wake.clear()
            try:
                self.check()
                await asyncio.to_thread(self.service.persist_if_changed)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction_check_failed")

    def check(self) -> int:
        """One round; returns how many producers were asked."""
        svc = self.service
        now = self.clock.time_ms()
        timeout_ms = int(self.config.transaction_timeout_seconds * 1000)
        check_max = self.config.transaction_check_max
        asked = 0
        for e in svc.waiting():
            wait_ms = e.immunity_ms if e.check_times == 0 and e.immunity_ms else timeout_ms
            if now - e.store_timestamp < wait_ms:
                continue
            if e.check_times >= check_max:
                svc.discard(e)  # resolved (or, if the store refused, tried again next round)
                continue
            if svc.put_back(e) is None:
                continue
            svc.checks += 1
            if self._ask(svc.live[e.origin]):
                asked += 1
        svc.advance()
        return asked

    def _ask(self, e: HalfEntry) -> bool:
        ch = self.service.pick(self.producer_channels(e.group))
        if ch is None:
            log.warning("transaction_check_no_producer", group=e.group, msg_id=e.props.get(Prop.UNIQ_KEY, ""))
            return False
        view = self.service.store.read_record(e.commitlog_offset)
        if view is None:
            return False
        host, _, port = self.address().rpartition(":")
        ext = CheckTransactionStateRequest(
            topic=e.props.get(Prop.REAL_TOPIC),
            tran_state_table_offset=e.queue_offset,
            commit_log_offset=e.commitlog_offset,
            msg_id=e.props.get(Prop.UNIQ_KEY),
            transaction_id=e.props.get(Prop.UNIQ_KEY),
            offset_msg_id=offset_msg_id(pack_host(host, int(port or 0)), e.commitlog_offset),
        ).to_ext()
        ch.channel.push_oneway(Command.request(RequestCode.CHECK_TRANSACTION_STATE, ext, bytes(view)))
        log.info("transaction_check_sent", group=e.group, client_id=ch.client_id, check_times=e.check_times)
        return True

    def info(self) -> dict[str, Any]:
        svc = self.service
        return {**svc.state(), "commits": svc.commits, "rollbacks": svc.rollbacks, "checks": svc.checks}


__all__ = ["TransactionCheckService"]
