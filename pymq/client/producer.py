"""The producer: encode messages into records and send them to a queue's master broker.

    async with Producer("127.0.0.1:9876") as producer:
        result = await producer.send(Message("orders", b"hello", tags="created"))

A send takes at most ``send_timeout`` seconds in all, making up to ``1 + retry_times``
attempts on different brokers when a failure is retriable. A message is encoded once (so
its unique id survives retries) and bodies above ``compress_threshold`` are zlib-compressed.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

from pymq.client import broker_api
from pymq.client.hooks import SendHook, after_send, before_send
from pymq.client.instance import ClientInstance
from pymq.client.producer_encoding import ProducerEncoding
from pymq.client.routes import AUTO_CREATE_TOPIC, RouteCache
from pymq.client.selectors import (
    LatencyAwareSelector,
    MessageQueueSelector,
    QueueSelectionStrategy,
    RoundRobinSelector,
)
from pymq.client.send_result import SendResult, SendStatus
from pymq.errors import (
    ClientError,
    ClosedError,
    NoRouteError,
    PymqError,
    RequestTimeoutError,
    TransportError,
    error_for_response,
)
from pymq.logs import get_logger
from pymq.protocol import record as _record
from pymq.protocol.codes import ResponseCode
from pymq.protocol.message import Message, UniqueIdGenerator
from pymq.protocol.record import pack_host
from pymq.protocol.requests import SendMessageResponse
from pymq.protocol.route import MessageQueue

log = get_logger("client.producer")

__all__ = ["AUTO_CREATE_TOPIC", "Producer", "SendResult", "SendStatus"]
#: the answers that mean "stored", and the status each gives (the enum members themselves: none is made per send)
_STORED_CODES: dict[int, SendStatus] = {
    int(ResponseCode.SUCCESS): SendStatus.SEND_OK,
    int(ResponseCode.FLUSH_DISK_TIMEOUT): SendStatus.FLUSH_DISK_TIMEOUT,
    int(ResponseCode.FLUSH_SLAVE_TIMEOUT): SendStatus.FLUSH_SLAVE_TIMEOUT,
    int(ResponseCode.SLAVE_NOT_AVAILABLE): SendStatus.SLAVE_NOT_AVAILABLE,
}
_RESERVED_BYTES = (b"\x01", b"\x02")
_RESP_QUEUE_ID = SendMessageResponse.WIRE["queue_id"]
_RESP_QUEUE_OFFSET = SendMessageResponse.WIRE["queue_offset"]
_RESP_COMMIT_LOG_OFFSETS = SendMessageResponse.WIRE["commit_log_offsets"]


class Producer(ProducerEncoding):
    """Sends messages; see the module docstring. Use as an async context manager."""

    def __init__(
        self,
        namesrv: str | list[str],
        group: str = "DEFAULT_PRODUCER",
        *,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        compress_threshold: int = 4096,
        compress_level: int = 5,
        max_message_size: int = 4 * 1024 * 1024,
        latency_aware: bool = False,
        selector: QueueSelectionStrategy | None = None,
        **client_options: Any,
    ) -> None:
        self.namesrv = namesrv
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.compress_threshold = compress_threshold
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.selector: QueueSelectionStrategy = selector or (
            LatencyAwareSelector() if latency_aware else RoundRobinSelector()
        )
        self._client_options = client_options
        self.instance: ClientInstance | None = None
        self._routes: RouteCache | None = None
        #: topics sent to, refreshed by the instance (the queues themselves live in its route cache)
        self._topics: set[str] = set()
        self._ids: UniqueIdGenerator | None = None
        self._born_host = b"\x00" * 8
        self._callbacks: set[asyncio.Task[Any]] = set()
        #: before/after hooks of every send (see pymq.client.hooks); empty: the send path skips them
        self.hooks: list[SendHook] = []
        self._started = False
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def start(self) -> Producer:
        if self._started:
            return self
        self.instance = ClientInstance.acquire(self.namesrv, **self._client_options)
        if self.group in self.instance.producers:
            await self.instance.release()
            raise ClientError(f"producer group {self.group} is already started in client {self.instance.client_id}")
        self.instance.producers[self.group] = self
        self._routes = self.instance.routes
        ip = self.instance.client_id.split("@", 1)[0]
        self._ids = UniqueIdGenerator(ip)
        self._born_host = pack_host(ip, 0)
        await self.instance.start()
        self._started = True
        return self

    async def close(self) -> None:
        if not self._started or self._closed:
            return
        self._closed = True
        if self._callbacks:
            await asyncio.gather(*self._callbacks, return_exceptions=True)
        inst = self.instance
        assert inst is not None
        inst.producers.pop(self.group, None)
        await inst.unregister(producer_group=self.group)
        await inst.release()

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def add_hook(self, hook: SendHook) -> None:
        """Call ``hook.before_send(event)`` / ``hook.after_send(event)`` around every send."""
        self.hooks.append(hook)

    # --- ClientMember -----------------------------------------------------------------------------------------

    def heartbeat_data(self) -> None:
        return None

    def topics_of_interest(self) -> list[str]:
        return list(self._topics)

    # --- routing ------------------------------------------------------------------------------------------

    async def queues_for(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues (fetching the route on first use)."""
        routes = self._routes
        if routes is not None:
            queues = routes.cached_write_queues(topic)  # the hot path: one dict lookup
            if queues:
                return queues
        queues = await self._instance().routes.write_queues(topic)
        if not queues:
            raise NoRouteError(f"No route info of this topic: {topic} (create it with pymq-admin topic-create)")
        self._topics.add(topic)
        return queues

    def _instance(self) -> ClientInstance:
        if self._closed:
            raise ClosedError("producer is closed")
        if self.instance is None or not self._started:
            raise ClientError("producer is not started: use 'async with Producer(...)' or await start()")
        return self.instance

    # --- sending -------------------------------------------------------------------------------------------

    async def send(
        self,
        msg: Message,
        *,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer.

        With ``selector`` (and its ``arg``, e.g. an order id) or an explicit ``queue``, the
        message goes to that queue only, without retrying elsewhere: that keeps related
        messages in order.
        """
        event = before_send(self.hooks, self.group, (msg,), "send") if self.hooks else None
        try:
            body = msg.body
            # _check's tests inline for the usual bytes body (it runs per send); _check names what is wrong
            if body.__class__ is not bytes or not body or len(body) > self.max_message_size or not msg.topic:
                self._check(msg)
            # A plain message (no keys, properties or delay; not to be compressed) is encoded by the
            # accelerator's batch encoder as a batch of one: record, unique id and list in one C call.
            c = _record.speedups
            ids_gen = self._ids
            plain: Any = None
            if c is not None and ids_gen is not None:
                topic = msg.topic
                born_ts = int(time.time() * 1000)
                plain = c.encode_batch(
                    [msg],
                    topic,
                    topic.encode(),
                    born_ts,
                    self._born_host,
                    self.max_message_size,
                    self.compress_threshold,
                    ids_gen.id_head(born_ts),
                    ids_gen.counter,
                )
            if plain is not None and plain is not NotImplemented:
                record, ids = plain
            else:  # anything else (and without the accelerator): the general encoder, which names errors
                record, uniq = self._encode(msg)
                ids = [uniq]
            result = await self._send_record(msg.topic, record, ids, False, msg, selector, arg, queue, timeout)
        except BaseException as exc:
            if event is not None:
                after_send(self.hooks, event, None, exc)
            raise
        if event is not None:
            after_send(self.hooks, event, result, None)
        return result

    async def send_delayed(
        self,
        msg: Message,
        *,
        delay_ms: int | None = None,
        deliver_at_ms: int | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send a timer message: delivered ``delay_ms`` after the broker gets it, or at ``deliver_at_ms``
        (wall clock, ms since the epoch). Beyond the broker's maximum delay the send fails with
        :class:`~pymq.errors.MessageIllegalError` (MESSAGE_ILLEGAL) naming the limit."""
        if (delay_ms is None) == (deliver_at_ms is None):
            raise ClientError("send_delayed needs exactly one of delay_ms and deliver_at_ms")
        if delay_ms is not None:
            msg.set_delay_ms(delay_ms)
        else:
            assert deliver_at_ms is not None
            msg.set_delivery_time(deliver_at_ms)
        return await self.send(msg, timeout=timeout)

    async def send_batch(
        self, messages: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic in one request; they land in one queue, in order."""
        if not messages:
            raise ClientError("send_batch needs at least one message")
        event = before_send(self.hooks, self.group, messages, "batch") if self.hooks else None
        try:
            topic = messages[0].topic
            data, ids = self._encode_batch(messages, topic)
            result = await self._send_record(topic, data, ids, True, None, None, None, queue, timeout)
        except BaseException as exc:
            if event is not None:
                after_send(self.hooks, event, None, exc)
            raise
        if event is not None:
            after_send(self.hooks, event, result, None)
        return result

    def send_with_callback(
        self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], Any], **kwargs: Any
    ) -> asyncio.Task[None]:
        """Send in the background and call ``callback(result, error)`` (a function or a coroutine function)."""
        self._instance()

        async def run() -> None:
            result: SendResult | None = None
            error: BaseException | None = None
            try:
                result = await self.send(msg, **kwargs)
            except Exception as exc:
                error = exc
            try:
                out = callback(result, error)
                if inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception("send_callback_failed")

        task = asyncio.ensure_future(run())
        self._callbacks.add(task)
        task.add_done_callback(self._callbacks.discard)
        return task

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an answer (no result, no retry): fastest, least reliable."""
        event = before_send(self.hooks, self.group, (msg,), "oneway") if self.hooks else None
        try:
            self._check(msg)
            record, _ = self._encode(msg)
            inst = self._instance()
            mq = queue or self.selector.select(await self.queues_for(msg.topic), None)
            addr = inst.broker_addr(mq.brokerName)
            if addr is None:
                raise NoRouteError(f"no master address for broker {mq.brokerName}")
            await inst.rpc.invoke_oneway(addr, broker_api.send_message(msg.topic, mq.queueId, self.group, record))
        except BaseException as exc:
            if event is not None:
                after_send(self.hooks, event, None, exc)
            raise
        if event is not None:
            after_send(self.hooks, event, None, None)

    async def _send_record(
        self,
        topic: str,
        body: bytes,
        ids: list[str],
        batch: bool,
        msg: Message | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        queue: MessageQueue | None,
        timeout: float | None,
    ) -> SendResult:
        inst = self.instance
        if inst is None or self._closed or not self._started:
            inst = self._instance()  # raises why not
        routes = inst.routes
        rpc = inst.rpc
        loop = asyncio.get_running_loop()
        budget = self.send_timeout if timeout is None else timeout
        remaining = budget
        deadline = loop.time() + budget
        fixed = queue is not None or selector is not None
        attempts = 1 if fixed else 1 + self.retry_times
        strategy = self.selector
        # Plain round robin ignores how sends went: its sends skip the clock reads for latency.
        timed = strategy.__class__ is not RoundRobinSelector
        started = 0.0
        last_broker: str | None = None
        last_error: PymqError | None = None
        for attempt in range(attempts):
            if attempt:
                remaining = deadline - loop.time()
            if remaining <= 0:
                break
            # queues_for's hot path inline: one dict lookup
            queues = routes.cached_write_queues(topic)
            if not queues:
                try:
                    queues = await self.queues_for(topic)
                except NoRouteError as exc:
                    # Routed, but no master now (between two masters, issue 32): wait for the
                    # instance's next paced route refresh within the budget instead of failing at once.
                    if routes.route(topic) is None or attempt + 1 >= attempts:
                        raise
                    last_error = exc
                    await inst.refreshed(deadline - loop.time())
                    continue
            if queue is not None:
                mq = queue
            elif selector is not None:
                mq = selector(queues, msg, arg)
            else:
                mq = strategy.select(queues, last_broker)
            broker_name = last_broker = mq.brokerName
            addr = routes.master_addr(broker_name)
            if addr is None:
                await inst.update_route(topic)
                addr = inst.broker_addr(broker_name)
                if addr is None:
                    last_error = NoRouteError(f"no master address for broker {broker_name}")
                    continue
            if timed:
                started = loop.time()
            cmd = broker_api.send_message(topic, mq.queueId, self.group, body, batch=batch)
            # rpc.invoke without its coroutines when the connection is open and has room
            conn = rpc.connection_if_any(addr)
            fut = conn.send_request(cmd, remaining) if conn is not None else None
            try:
                resp = await (fut if fut is not None else rpc.invoke(addr, cmd, remaining))
            except asyncio.CancelledError:
                if fut is not None and conn is not None:
                    conn.abandon(cmd.opaque)
                raise
            except TransportError as exc:
                if timed:
                    strategy.update(broker_name, (loop.time() - started) * 1000, True)
                last_error = exc
                if inst.note_failure(exc):  # the broker may be gone: the instance fetches the routes now
                    await self._await_new_route(inst, queues, broker_name, deadline)
                continue
            if timed:
                strategy.update(broker_name, (loop.time() - started) * 1000, False)
            status = _STORED_CODES.get(resp.code)
            if status is not None:
                # the answer's fields read inline (no header object); the queue itself is reused when the broker
                # stored where it was asked to (always, but for a broker that moves sends)
                ext = resp.ext
                queue_id = ext.get(_RESP_QUEUE_ID)
                if queue_id is not None and queue_id != mq.queueId:
                    mq = MessageQueue(topic, broker_name, int(queue_id))
                elif mq.topic != topic:
                    mq = MessageQueue(topic, broker_name, mq.queueId)
                offsets = ext.get(_RESP_COMMIT_LOG_OFFSETS)
                return SendResult(
                    status,
                    ids[0],
                    mq,
                    int(ext.get(_RESP_QUEUE_OFFSET, -1)),
                    ids,
                    offsets if offsets.__class__ is list else list(offsets or ()),
                    addr,
                )
            err = error_for_response(resp.code, resp.remark, addr)
            last_error = err
            if not err.retriable:
                raise err
            if inst.note_failure(err):  # not the master (fenced, demoted, lease lapsed): routes fetched now
                await self._await_new_route(inst, queues, broker_name, deadline)
            elif err.invalid_route:
                routes.forget_write_queues(topic)
            if resp.code in (ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE):
                strategy.update(broker_name, 0, True)
        if last_error is None:
            raise RequestTimeoutError(f"send to {topic} timed out after {budget:.3f}s")
        raise last_error

    @staticmethod
    async def _await_new_route(inst: ClientInstance, queues: list[MessageQueue], broker: str, deadline: float) -> None:
        """Before retrying after ``broker`` failed as an old master would: when no other broker has a
        queue to retry on, wait (within the budget) for the instance's route refresh, so the retry goes
        to the new master rather than to the same address at once."""
        if any(q.brokerName != broker for q in queues):
            return  # retried on another broker now; the refresh runs meanwhile
        await inst.refreshed(deadline - asyncio.get_running_loop().time())
