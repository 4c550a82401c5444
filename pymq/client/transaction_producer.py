"""Transactional messages: a local transaction and a message publish that commit or roll back together.

    async def local_tx(msg: Message, order_id: int) -> TransactionState:
        ...                                   # the local database change
        return TransactionState.COMMIT

    async def checker(msg: MessageExt) -> TransactionState:
        ...                                   # did that change commit? (the broker asks after a timeout)

    async with TransactionProducer(namesrv, "orders-tx", checker) as producer:
        result = await producer.send_in_transaction(Message("orders", b"..."), local_tx, 42)

As in RocketMQ: the message is first sent as a *half* message (the broker stores it where
no consumer reads it), then ``local_tx(message, arg)`` runs, then the producer tells the
broker COMMIT (the message is delivered on its topic) or ROLLBACK (it is dropped) with a
oneway END_TRANSACTION. UNKNOWN, an exception in ``local_tx``, a lost END_TRANSACTION or a
producer that dies in between leave the outcome open: after its transaction timeout the
broker asks a live producer of the same group, whose ``checker(message)`` answers from the
local state (so the checker must not depend on this process's memory). ``local_tx`` and
``checker`` may be plain functions or coroutine functions; plain ones run on the event
loop, so they should be quick (the sync facade runs them on threads instead).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import operator
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pymq.client import broker_api
from pymq.client.producer import Producer
from pymq.client.send_result import SendResult, SendStatus
from pymq.errors import LocalTransactionError, PymqError, TransactionError
from pymq.logs import get_logger
from pymq.protocol.message import Message, MessageExt, Prop
from pymq.protocol.record_edit import property_bytes
from pymq.protocol.requests import CheckTransactionStateRequest
from pymq.protocol.transaction import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    PGROUP,
    TRAN_MSG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)

log = get_logger("client.transaction")

__all__ = ["Checker", "LocalTransaction", "TransactionProducer", "TransactionSendResult", "TransactionState"]


class TransactionState(StrEnum):
    """A local transaction's outcome (RocketMQ's LocalTransactionState names)."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"


#: ``local_tx(message, arg) -> TransactionState`` (or an awaitable of one)
LocalTransaction = Callable[[Message, Any], "TransactionState | Awaitable[TransactionState]"]
#: ``checker(message) -> TransactionState`` (or an awaitable of one); the message as stored, on its real topic
Checker = Callable[[MessageExt], "TransactionState | Awaitable[TransactionState]"]

_TX_TYPE = {TransactionState.COMMIT: TRANSACTION_COMMIT_TYPE, TransactionState.ROLLBACK: TRANSACTION_ROLLBACK_TYPE}
#: a Message's fields, in its constructor's order (copied per half message)
_MESSAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Message) if f.init)


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    """The half message's send result and what the local transaction decided."""

    local_state: TransactionState = TransactionState.UNKNOWN


#: the properties that mark a half message (send_half sets them)
_HALF_PROPERTIES = frozenset({TRAN_MSG, PGROUP, CHECK_IMMUNITY_TIME_IN_SECONDS})
#: a SendResult's fields, in its constructor's order (copied into each TransactionSendResult)
_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(SendResult) if f.init)
#: those fields of a SendResult, as a tuple (one C call)
_result_fields = operator.attrgetter(*_RESULT_FIELDS)


class TransactionProducer(Producer):
    """A producer of transactional messages; see the module docstring.

    ``topics``: topics whose brokers this producer heartbeats from the start, so that it
    can answer check-backs before it has sent anything (e.g. a producer started to take
    over for one that died). Every other option is :class:`Producer`'s.
    """

    def __init__(
        self,
        namesrv: str | list[str],
        group: str,
        checker: Checker,
        *,
        topics: Sequence[str] = (),
        **options: Any,
    ) -> None:
        super().__init__(namesrv, group, **options)
        #: what marks a record as this producer's half message (its encoded properties)
        self._half_marks = property_bytes(TRAN_MSG, "true") + property_bytes(PGROUP, group)
        self.checker = checker
        self.initial_topics = list(topics)
        self._checks: set[asyncio.Task[None]] = set()

    async def start(self) -> TransactionProducer:
        if self._started:
            return self
        await super().start()
        if self.initial_topics:
            try:
                for topic in self.initial_topics:
                    await self.queues_for(topic)
            except BaseException:
                await self.close()
                raise
            await self._instance().send_heartbeat_to_all()
        return self

    async def close(self) -> None:
        if self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)
        await super().close()

    async def __aenter__(self) -> TransactionProducer:
        return await self.start()

    # --- the two phases -----------------------------------------------------------------------------------

    async def send_in_transaction(
        self,
        msg: Message,
        local_tx: LocalTransaction,
        arg: Any = None,
        *,
        transaction_timeout: float | None = None,
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``local_tx(msg, arg)``, then commit or roll back.

        ``transaction_timeout`` (whole seconds) overrides the broker's timeout before the
        first check-back for this message. A failed half send raises (``local_tx`` is not
        run); a half message the broker stored without the durability asked for (e.g.
        FLUSH_DISK_TIMEOUT) is rolled back without running ``local_tx``, as RocketMQ does.
        If ``local_tx`` raises, :class:`~pymq.errors.LocalTransactionError` is raised and the
        outcome is left to the check-back.
        """
        half = await self.send_half(msg, transaction_timeout=transaction_timeout)
        if half.status != SendStatus.SEND_OK:
            await self.end_transaction(half, TransactionState.ROLLBACK)
            return transaction_result(half, TransactionState.ROLLBACK)
        try:
            out = local_tx(msg, arg)
            # (a plain function's state, the usual answer, skips the awaitable check)
            state = out if out.__class__ is TransactionState else await out if inspect.isawaitable(out) else out
        except Exception as exc:
            raise LocalTransactionError(f"local transaction failed: {exc!r}", half) from exc
        state = as_state(state, "local transaction")
        await self.end_transaction(half, state)
        return transaction_result(half, state)

    async def send_half(self, msg: Message, *, transaction_timeout: float | None = None) -> SendResult:
        """Phase one: store ``msg`` as a half message (invisible to consumers until committed)."""
        if msg.delay_level > 0:
            raise TransactionError("transactional messages cannot be delayed")
        if transaction_timeout is not None and transaction_timeout < 1:
            raise TransactionError("transaction_timeout is in whole seconds, at least 1")
        new_topic = msg.topic not in self._topics
        if self.hooks or not _HALF_PROPERTIES.isdisjoint(msg.properties):
            # Send hooks see the half message as sent, and the marks replace the message's own
            # properties of those names: a copy with them set.
            props = {**msg.properties, TRAN_MSG: "true", PGROUP: self.group}
            if transaction_timeout is not None:
                props[CHECK_IMMUNITY_TIME_IN_SECONDS] = str(int(transaction_timeout))
            half = Message(*[getattr(msg, name) for name in _MESSAGE_FIELDS])  # (dataclasses.replace, less its checks)
            half.properties = props
            result = await self.send(half)
        else:
            # The usual case: the marks appended to the record's properties as bytes, in the order the
            # copy's would have them (no copy of the message, no dict merge, one encoding pass).
            marks = self._half_marks
            if transaction_timeout is not None:
                marks += property_bytes(CHECK_IMMUNITY_TIME_IN_SECONDS, str(int(transaction_timeout)))
            body = msg.body
            if body.__class__ is not bytes or not body or len(body) > self.max_message_size or not msg.topic:
                self._check(msg)  # (send's checks)
            record, uniq = self._encode(msg, extra=marks)
            result = await self._send_record(msg.topic, record, [uniq], False, msg, None, None, None, None)
        if new_topic:
            # A new broker may have joined the route: make sure it knows us before it needs to check back.
            await self._instance().send_heartbeat_to_all()
        return result

    async def end_transaction(self, half: SendResult, state: TransactionState, *, from_check: bool = False) -> None:
        """Phase two: tell the broker that stored ``half`` to commit or roll it back (oneway; UNKNOWN sends nothing)."""
        tx_type = _TX_TYPE.get(state)
        if tx_type is None or not half.commit_log_offsets:
            return
        cmd = broker_api.end_transaction(
            self.group,
            half.queue_offset,
            half.commit_log_offsets[0],
            tx_type,
            msg_id=half.msg_id,
            from_check=from_check,
            topic=half.message_queue.topic,
        )
        rpc = self._instance().rpc
        conn = rpc.connection_if_any(half.store_addr)
        # The usual case: no coroutine, and sent with the caller's next request of this tick (see
        # Connection.send_oneway_now).
        if conn is not None and conn.send_oneway_now(cmd, share=True):
            return
        try:
            await rpc.invoke_oneway(half.store_addr, cmd)
        except PymqError as exc:
            # The broker will check back: the outcome is not lost, only delayed.
            log.warning("end_transaction_failed", broker=half.store_addr, msg_id=half.msg_id, reason=str(exc))

    # --- check-back ------------------------------------------------------------------------------------------

    def check_transaction_state(self, broker_addr: str, header: CheckTransactionStateRequest, msg: MessageExt) -> None:
        """A broker asks (called by the client instance): run the checker in the background and answer."""
        task = asyncio.ensure_future(self._answer_check(broker_addr, header, msg))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer_check(self, broker_addr: str, header: CheckTransactionStateRequest, msg: MessageExt) -> None:
        real_topic = msg.properties.get(Prop.REAL_TOPIC)
        if real_topic:
            msg.topic = real_topic
        real_qid = msg.properties.get(Prop.REAL_QID, "")
        if real_qid.isdigit():
            msg.queue_id = int(real_qid)
        try:
            out = self.checker(msg)
            state = as_state(await out if inspect.isawaitable(out) else out, "checker")
        except Exception:
            log.exception("transaction_checker_failed", group=self.group, msg_id=header.msg_id)
            return
        tx_type = _TX_TYPE.get(state)
        if tx_type is None:
            return
        cmd = broker_api.end_transaction(
            self.group,
            header.tran_state_table_offset,
            header.commit_log_offset,
            tx_type,
            msg_id=header.msg_id or "",
            from_check=True,
            topic=real_topic or None,
        )
        try:
            await self._instance().rpc.invoke_oneway(broker_addr, cmd)
        except PymqError as exc:
            log.warning("end_transaction_failed", broker=broker_addr, msg_id=header.msg_id, reason=str(exc))


def as_state(value: object, what: str) -> TransactionState:
    """A local transaction's or checker's answer as a state (anything unrecognised is UNKNOWN, logged)."""
    if isinstance(value, TransactionState):
        return value
    if isinstance(value, str) and value in TransactionState._value2member_map_:
        return TransactionState(value)
    log.warning("transaction_state_invalid", source=what, value=repr(value))
    return TransactionState.UNKNOWN


def transaction_result(half: SendResult, state: TransactionState) -> TransactionSendResult:
    """The half message's send result with the local transaction's decision."""
    return TransactionSendResult(*_result_fields(half), state)  # type: ignore[call-arg]
