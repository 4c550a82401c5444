"""END_TRANSACTION's handler without sockets: when a oneway one is applied, and what it answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pymq.broker.transaction.handlers import TransactionHandlers
from pymq.client import broker_api
from pymq.protocol.command import FLAG_ONEWAY, Command
from pymq.protocol.requests import EndTransactionRequest
from pymq.protocol.transaction import TRANSACTION_COMMIT_TYPE
from pymq.testing import capture_logs


class Service:
    """Records the END_TRANSACTIONs applied; raises if told to."""

    def __init__(self, fail: bool = False) -> None:
        self.applied: list[EndTransactionRequest] = []
        self.fail = fail

    def end_transaction(self, h: EndTransactionRequest) -> str:
        if self.fail:
            raise RuntimeError("transactions are not open")
        self.applied.append(h)
        return "commit"


class Channel:
    remote_addr = "127.0.0.1:1"


def _end(oneway: bool) -> Command:
    cmd = broker_api.end_transaction("g", 3, 1234, TRANSACTION_COMMIT_TYPE, msg_id="ID", topic="t")
    cmd.opaque = 7
    if oneway:
        cmd.flags |= FLAG_ONEWAY
    return cmd


def _handlers(service: Service, writable: list[bool]) -> TransactionHandlers:
    return TransactionHandlers(transactions=lambda: service, writable=lambda: writable[0])  # type: ignore[arg-type,return-value]


async def test_a_oneway_one_is_applied_on_the_next_callback_and_not_after_a_fence() -> None:
    service, writable = Service(), [True]
    handlers = _handlers(service, writable)
    channel: Any = Channel()
    assert handlers.end_transaction(_end(oneway=True), channel) is None
    assert service.applied == []
    await asyncio.sleep(0)
    assert [(h.commit_log_offset, h.tran_state_table_offset) for h in service.applied] == [(1234, 3)]
    # Fenced (or demoted) between the read and the callback: not applied, the check-back resolves it.
    assert handlers.end_transaction(_end(oneway=True), channel) is None
    writable[0] = False
    with capture_logs() as events:
        await asyncio.sleep(0)
    assert len(service.applied) == 1
    assert [e["event"] for e in events] == ["end_transaction_not_applied"]


async def test_a_failing_oneway_one_is_logged_and_an_answered_one_raises() -> None:
    handlers = _handlers(Service(fail=True), [True])
    channel: Any = Channel()
    with capture_logs() as events:
        handlers.end_transaction(_end(oneway=True), channel)
        await asyncio.sleep(0)
    assert [e["event"] for e in events] == ["end_transaction_failed"]
    # Answered: the dispatcher turns the exception into an error answer, as for any handler.
    with pytest.raises(RuntimeError):
        handlers.end_transaction(_end(oneway=False), channel)


async def test_an_answered_one_is_applied_before_its_answer() -> None:
    service = Service()
    answer = _handlers(service, [True]).end_transaction(_end(oneway=False), Channel())  # type: ignore[arg-type]
    assert answer is not None and answer.remark == "commit" and answer.opaque == 7
    assert len(service.applied) == 1
