"""The SimpleConsumer (RocketMQ 5's pop consumption): receive, then ack each message.

    async with SimpleConsumer("127.0.0.1:9876", "billing") as consumer:    # after subscribe()
        for msg in await consumer.receive(16, invisible_duration=30.0):
            handle(msg)
            await consumer.ack(msg)          # or: await consumer.change_invisible_duration(msg, 60.0)

A received message is invisible to the group's other receivers for ``invisible_duration``
seconds; acked, it is done; neither acked nor extended, the broker makes it visible again
after the duration (``reconsume_times`` + 1), and past the group's ``retryMaxTimes`` it goes
to ``%DLQ%<group>``. No rebalance: every SimpleConsumer of a group may receive from every
queue; the broker hands each message to one receiver at a time. Receipt handles are the
broker's (opaque, signed): an ack the broker refuses raises
:class:`~pymq.errors.InvalidReceiptHandleError` whose ``reason`` says why (``expired``,
``acked``, ``stale``, ``forged``, ``mismatch``).
"""

from __future__ import annotations

from typing import Any, cast

from pymq.client import broker_api
from pymq.client.ack_coalescer import AckCoalescer
from pymq.client.consumer_types import ConsumeFromWhere
from pymq.client.instance import ClientInstance
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.errors import (
    ClientError,
    ClosedError,
    InvalidReceiptHandleError,
    NoRouteError,
    PymqError,
    error_for_response,
)
from pymq.logs import get_logger
from pymq.protocol.codes import ResponseCode
from pymq.protocol.filter import Subscription, parse_tags_strict
from pymq.protocol.frame import Command
from pymq.protocol.message import MessageExt, Prop, iter_messages
from pymq.protocol.requests import (
    MAX_BATCH_ACK,
    MAX_INVISIBLE_MS,
    MAX_POP_MSG_NUMS,
    MIN_INVISIBLE_MS,
    POP_INIT_MAX,
    POP_INIT_MIN,
    RETRY_PREFIX,
)

log = get_logger("client.simple")

_EMPTY = (ResponseCode.NO_MESSAGE, ResponseCode.POLLING_TIMEOUT)
_INIT_MODES = {ConsumeFromWhere.FIRST_OFFSET: POP_INIT_MIN, ConsumeFromWhere.LAST_OFFSET: POP_INIT_MAX}


class ReceivedMessage(MessageExt):
    """A received message: a :class:`MessageExt` plus its receipt handle (replaced by a change of invisible time)."""

    __slots__ = ("receipt_handle",)

    receipt_handle: str


def _millis(seconds: float, what: str) -> int:
    ms = round(seconds * 1000)
    if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
        raise ClientError(f"{what} must be {MIN_INVISIBLE_MS / 1000}..{MAX_INVISIBLE_MS // 1000} s, got {seconds}")
    return ms


class SimpleConsumer:
    def __init__(
        self,
        namesrv: str | list[str],
        group: str,
        *,
        await_duration: float = 10.0,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.FIRST_OFFSET,
        clock: Clock | None = None,
        **options: Any,
    ) -> None:
        if consume_from_where not in _INIT_MODES:
            raise ClientError(f"a SimpleConsumer starts at FIRST_OFFSET or LAST_OFFSET, not {consume_from_where.name}")
        self.namesrv = namesrv
        self.group = group
        #: where a group without offsets starts (on each queue, at its first receive)
        self.init_mode = _INIT_MODES[consume_from_where]
        #: how long receive() waits for messages when none are there (its default)
        self.await_duration = await_duration
        self.clock = clock or SYSTEM_CLOCK
        self._client_options = options
        self.subscriptions: dict[str, Subscription] = {}
        self.instance: ClientInstance | None = None
        self._closed = False
        self._rr = 0
        self._acks = AckCoalescer(self._send_acks)

    def subscribe(self, topic: str, tag_expr: str = "*") -> None:
        """Receive ``topic`` messages whose tag matches ``tag_expr`` (``*`` or ``TagA || TagB``)."""
        try:
            parse_tags_strict(tag_expr)
        except ValueError as exc:
            raise ClientError(str(exc)) from None
        self.subscriptions[topic] = Subscription.parse(topic, tag_expr)

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> SimpleConsumer:
        if self.instance is not None:
            return self
        if self._closed:
            raise ClosedError("consumer is closed")
        inst = ClientInstance.acquire(self.namesrv, clock=self.clock, **self._client_options)
        await inst.start()
        self.instance = inst
        for topic in self.subscriptions:
            try:
                await inst.update_route(topic)
            except PymqError as exc:
                log.warning("route_fetch_failed", topic=topic, reason=str(exc))
        return self

    async def close(self) -> None:
        """Stop; messages received and not acked come back after their invisible time."""
        if self._closed:
            return
        self._closed = True
        inst, self.instance = self.instance, None
        if inst is not None:
            await inst.release()

    async def __aenter__(self) -> SimpleConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _instance(self) -> ClientInstance:
        if self._closed:
            raise ClosedError("consumer is closed")
        if self.instance is None:
            raise ClientError("consumer is not started")
        return self.instance

    # --- receive --------------------------------------------------------------------------------------------

    async def _targets(self) -> list[tuple[Subscription, str, str]]:
        """(subscription, broker name, address) for every broker serving a subscribed topic."""
        inst = self._instance()
        out: list[tuple[Subscription, str, str]] = []
        for topic, sub in self.subscriptions.items():
            queues = await inst.routes.read_queues(topic)
            for name in sorted({mq.brokerName for mq in queues}):
                addr = inst.broker_addr(name)
                if addr is not None:
                    out.append((sub, name, addr))
        return out

    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0, await_duration: float | None = None
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` (1..32), invisible to the group for ``invisible_duration`` seconds.

        Asks each broker of the subscribed topics in turn (a moving start); when none has
        messages, waits up to ``await_duration`` seconds (default: the consumer's) on one of
        them (the next call waits on the next). An empty list when nothing came.
        """
        if not 1 <= max_messages <= MAX_POP_MSG_NUMS:
            raise ClientError(f"max_messages must be 1..{MAX_POP_MSG_NUMS}, got {max_messages}")
        invisible_ms = _millis(invisible_duration, "invisible_duration")
        if not self.subscriptions:
            raise ClientError("subscribe to at least one topic first")
        targets = await self._targets()
        if not targets:
            raise NoRouteError(f"no broker serves {', '.join(self.subscriptions)}")
        start = self._rr % len(targets)
        self._rr += 1
        order = targets[start:] + targets[:start]
        for sub, name, addr in order:
            msgs = await self._pop(sub, name, addr, max_messages, invisible_ms, 0)
            if msgs:
                return msgs
        wait = self.await_duration if await_duration is None else await_duration
        if wait > 0:
            sub, name, addr = order[0]
            return await self._pop(sub, name, addr, max_messages, invisible_ms, round(wait * 1000))
        return []

    async def _pop(
        self, sub: Subscription, broker_name: str, addr: str, max_messages: int, invisible_ms: int, poll_ms: int
    ) -> list[ReceivedMessage]:
        inst = self._instance()
        cmd = broker_api.pop_message(
            self.group,
            sub.topic,
            sub.expression,
            max_nums=max_messages,
            invisible_ms=invisible_ms,
            poll_ms=poll_ms,
            born_time=self.clock.time_ms(),
            init_mode=self.init_mode,
        )
        resp = await _invoke(inst, addr, cmd, inst.config.rpc_timeout_seconds + poll_ms / 1000)
        if resp.code in _EMPTY:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise _refused(inst, resp.code, resp.remark, addr)
        handles = broker_api.read_pop_handles(resp)
        out: list[ReceivedMessage] = []
        unwanted: list[ReceivedMessage] = []
        body = cast(bytes | memoryview, resp.body)
        received = iter_messages(body, broker_name=broker_name, message_class=ReceivedMessage)
        for msg, handle in zip(received, handles, strict=False):
            msg.receipt_handle = handle
            if msg.topic.startswith(RETRY_PREFIX):
                msg.topic = msg.properties.get(Prop.RETRY_TOPIC) or sub.topic
            if sub.tags and msg.properties.get(Prop.TAGS) not in sub.tags:
                unwanted.append(msg)  # a tags-code collision on the broker: not ours
            else:
                out.append(msg)
        for msg in unwanted:
            try:
                await self.ack(msg)
            except PymqError as exc:
                log.warning("unwanted_message_ack_failed", topic=msg.topic, reason=str(exc))
        return out

    # --- ack and invisible time -------------------------------------------------------------------------------

    async def _addr(self, message: ReceivedMessage) -> str:
        inst = self._instance()
        addr = inst.broker_addr(message.broker_name)
        if addr is None:
            await inst.update_route(message.topic)
            addr = inst.broker_addr(message.broker_name)
            if addr is None:
                raise NoRouteError(f"no address for broker {message.broker_name}")
        return addr

    async def ack(self, message: ReceivedMessage) -> None:
        """The message is done; raises InvalidReceiptHandleError if the broker refuses the handle.

        Acks made in the same event-loop turn (several receivers acking at once) go to the broker
        as one request (:mod:`pymq.client.ack_coalescer`); each call still returns or raises
        with the broker's answer for its own message.
        """
        addr = self._instance().broker_addr(message.broker_name)  # (known: no coroutine for _addr)
        if addr is None:
            addr = await self._addr(message)
        await self._acks.ack(addr, message.topic, message.receipt_handle)

    async def _send_acks(self, addr: str, topic: str, handles: list[str]) -> list[BaseException | None]:
        """One coalesced batch of acks: ACK_MESSAGE when alone, else BATCH_ACK_MESSAGE requests."""
        inst = self._instance()
        timeout = inst.config.rpc_timeout_seconds
        if len(handles) == 1:
            resp = await _invoke(inst, addr, broker_api.ack_message(self.group, topic, handles[0]), timeout)
            if resp.code == ResponseCode.INVALID_RECEIPT_HANDLE:
                return [InvalidReceiptHandleError(resp.code, resp.remark, addr)]
            if resp.code != ResponseCode.SUCCESS:
                raise _refused(inst, resp.code, resp.remark, addr)
            return [None]
        out: list[BaseException | None] = []
        for start in range(0, len(handles), MAX_BATCH_ACK):
            chunk = handles[start : start + MAX_BATCH_ACK]
            resp = await _invoke(inst, addr, broker_api.batch_ack(self.group, topic, chunk), timeout)
            if resp.code != ResponseCode.SUCCESS:
                raise _refused(inst, resp.code, resp.remark, addr)
            codes, remarks = broker_api.read_batch_ack_columns(resp, len(chunk))
            if not any(codes):  # (all acked: SUCCESS is 0)
                out.extend([None] * len(chunk))
                continue
            for code, remark in zip(codes, remarks, strict=True):
                if code == ResponseCode.SUCCESS:
                    out.append(None)
                elif code == ResponseCode.INVALID_RECEIPT_HANDLE:
                    out.append(InvalidReceiptHandleError(code, remark, addr))
                else:
                    out.append(error_for_response(code, remark, addr))
        return out

    async def ack_many(self, messages: list[ReceivedMessage]) -> list[InvalidReceiptHandleError | None]:
        """Ack several messages with one request per broker and topic (BATCH_ACK_MESSAGE).

        One answer per message, in order: None when acked, else the refusal (nothing raised for
        refusals; transport and broker failures raise as :meth:`ack` does).
        """
        inst = self._instance()
        out: list[InvalidReceiptHandleError | None] = [None] * len(messages)
        groups: dict[tuple[str, str], list[int]] = {}
        for i, m in enumerate(messages):
            groups.setdefault((m.broker_name, m.topic), []).append(i)
        for (_broker, topic), positions in groups.items():
            addr = await self._addr(messages[positions[0]])
            for start in range(0, len(positions), MAX_BATCH_ACK):
                chunk = positions[start : start + MAX_BATCH_ACK]
                cmd = broker_api.batch_ack(self.group, topic, [messages[i].receipt_handle for i in chunk])
                resp = await _invoke(inst, addr, cmd, inst.config.rpc_timeout_seconds)
                if resp.code != ResponseCode.SUCCESS:
                    raise _refused(inst, resp.code, resp.remark, addr)
                codes, remarks = broker_api.read_batch_ack_columns(resp, len(chunk))
                if not any(codes):  # (all acked: SUCCESS is 0)
                    continue
                for i, code, remark in zip(chunk, codes, remarks, strict=True):
                    if code == ResponseCode.INVALID_RECEIPT_HANDLE:
                        out[i] = InvalidReceiptHandleError(code, remark, addr)
                    elif code != ResponseCode.SUCCESS:
                        raise error_for_response(code, remark, addr)
        return out

    async def change_invisible_duration(self, message: ReceivedMessage, duration: float) -> None:
        """Keep the message invisible for ``duration`` seconds from now; its receipt handle is replaced."""
        inst = self._instance()
        addr = await self._addr(message)
        cmd = broker_api.change_invisible_time(
            self.group, message.topic, message.receipt_handle, _millis(duration, "duration")
        )
        resp = await _invoke(inst, addr, cmd, inst.config.rpc_timeout_seconds)
        if resp.code != ResponseCode.SUCCESS:
            raise _refused(inst, resp.code, resp.remark, addr)
        message.receipt_handle = broker_api.read_new_handle(resp)


async def _invoke(inst: ClientInstance, addr: str, cmd: Command, timeout: float) -> Command:
    """``inst.rpc.invoke``, telling the instance about a broker that cannot be reached (routes refreshed now)."""
    try:
        return await inst.rpc.invoke(addr, cmd, timeout)
    except PymqError as exc:
        inst.note_failure(exc)
        raise


def _refused(inst: ClientInstance, code: int, remark: str | None, addr: str) -> PymqError:
    """The error for a refusal; one meaning "not the master" (a slave, a fenced master) refreshes the routes."""
    err = error_for_response(code, remark, addr)
    inst.note_failure(err)
    return err


__all__ = ["ReceivedMessage", "SimpleConsumer"]
