"""A scripted in-memory broker for unit tests of producers and consumers (like kafka-python's MockBroker).

Each :class:`MockBroker` serves one loopback address through pymq's own
:class:`~pymq.transport.server.RpcServer`, so the client under test runs its real
transport. It answers every request from a script (per request code, in order) and falls
back to small in-memory defaults: sends are stored and acknowledged, pulls return what was
stored, offsets and locks are kept in dicts. Any MockBroker also answers route queries as a
fake nameserver, so a Producer or consumer can be pointed at it::

    async with MockBroker("broker-a") as a, MockBroker("broker-b") as b:
        a.add_topic("orders", [a, b], queues=2)        # a is also the nameserver
        a.script(RequestCode.SEND_MESSAGE, MockBroker.error(ResponseCode.SYSTEM_ERROR))
        async with Producer(a.address) as producer:
            result = await producer.send(Message("orders", b"x"))   # retried on broker-b

A scripted item is a response :class:`~pymq.protocol.frame.Command` (its opaque is set for
you), a :meth:`delay` wrapper, or a function ``(request) -> Command | None`` (may be async).
Every request is recorded in :attr:`requests`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.record import encode_record, pack_host, parse_record
from pymq.protocol.route import MASTER_ID, PERM_READ_WRITE, BrokerData, MessageQueue, QueueData, TopicRouteData
from pymq.tasks import wait_within
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Dispatcher
from pymq.transport.server import RpcServer

__all__ = ["MockBroker", "Scripted"]

Responder = Callable[[Command], "Command | Awaitable[Command | None] | None"]


@dataclass(slots=True)
class Scripted:
    """A scripted answer: ``response`` (or the default handler when None) after ``delay`` seconds."""

    response: Command | Responder | None
    delay: float = 0.0


ScriptItem = Command | Responder | Scripted


class MockBroker:
    """One scripted broker (and fake nameserver) on 127.0.0.1; see the module docstring."""

    def __init__(self, name: str = "broker-a", *, cluster: str = "DefaultCluster") -> None:
        self.name = name
        self.cluster = cluster
        self.requests: list[Command] = []
        self._scripts: dict[int, deque[ScriptItem]] = defaultdict(deque)
        self._handlers: dict[int, Responder] = {}
        self._routes: dict[str, TopicRouteData] = {}
        #: (topic, queue id) -> stored records (producer bytes), index = queue offset
        self.messages: dict[tuple[str, int], list[bytes]] = defaultdict(list)
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.consumers: dict[str, set[str]] = defaultdict(set)
        self.locks: dict[tuple[str, MessageQueue], str] = {}
        self.sent_back: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()
        self._closing = False
        self._physical = itertools.count()
        self.dispatcher = Dispatcher({int(code): self._handle for code in RequestCode}, name=f"mock-{name}")
        self.server = RpcServer(self.dispatcher, name=f"mock-{name}")
        self._defaults: dict[int, Responder] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.SEND_MESSAGE: self._send,
            RequestCode.SEND_BATCH_MESSAGE: self._send,
            RequestCode.PULL_MESSAGE: self._pull,
            RequestCode.HEART_BEAT: self._heartbeat,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_offset,
            RequestCode.GET_MAX_OFFSET: lambda c: c.response(ext={"offset": len(self._queue(c))}),
            RequestCode.GET_MIN_OFFSET: lambda c: c.response(ext={"offset": 0}),
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: lambda c: c.response(ext={"offset": 0}),
            RequestCode.LOCK_BATCH_MQ: self._lock,
            RequestCode.UNLOCK_BATCH_MQ: self._unlock,
            RequestCode.CONSUMER_SEND_MSG_BACK: self._send_back,
        }

    # --- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> MockBroker:
        await self.server.start()
        return self

    async def close(self) -> None:
        # Answer held long-polling pulls now: each would keep the drain waiting its whole grace.
        self._closing = True
        self._arrived.set()
        await self.server.close(grace=0.5)

    async def __aenter__(self) -> MockBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def address(self) -> str:
        return self.server.address

    # --- scripting ---------------------------------------------------------------------------------------

    def script(self, code: int, *items: ScriptItem) -> None:
        """Answer the next requests of ``code`` with ``items``, in order; then the default again."""
        self._scripts[int(code)].extend(items)

    def on(self, code: int, responder: Responder) -> None:
        """Answer every request of ``code`` (once the script is used up) with ``responder``."""
        self._handlers[int(code)] = responder

    @staticmethod
    def error(code: int, remark: str = "scripted error") -> Responder:
        """A scripted error answer with ``code``."""
        return lambda cmd: cmd.response(code, remark)

    @staticmethod
    def delay(seconds: float, then: Command | Responder | None = None) -> Scripted:
        """Answer after ``seconds`` with ``then`` (the default answer when None)."""
        return Scripted(then, seconds)

    @staticmethod
    def drop() -> Responder:
        """No answer at all: the client's request times out."""
        return lambda cmd: None

    def requests_of(self, code: int) -> list[Command]:
        return [c for c in self.requests if c.code == code]

    # --- fake nameserver ---------------------------------------------------------------------------------

    def add_topic(
        self,
        topic: str,
        brokers: Sequence[MockBroker],
        *,
        queues: int = 4,
        perm: int = PERM_READ_WRITE,
    ) -> TopicRouteData:
        """Serve a route for ``topic``: ``queues`` queues on each of ``brokers`` (as masters)."""
        route = TopicRouteData(
            queueDatas=[QueueData(b.name, queues, queues, perm) for b in brokers],
            brokerDatas=[BrokerData(b.cluster, b.name, {MASTER_ID: b.address}) for b in brokers],
        )
        self._routes[topic] = route
        return route

    def remove_topic(self, topic: str) -> None:
        self._routes.pop(topic, None)

    # --- stored messages ---------------------------------------------------------------------------------

    def stored(self, topic: str) -> list[tuple[int, bytes]]:
        """``(queue id, record)`` of every message stored for ``topic``."""
        return [(qid, r) for (t, qid), recs in sorted(self.messages.items()) if t == topic for r in recs]

    def _queue(self, cmd: Command) -> list[bytes]:
        return self.messages[(str(cmd.ext.get("topic", "")), int(cmd.ext.get("queueId", 0)))]

    # --- dispatch ----------------------------------------------------------------------------------------

    def _handle(self, cmd: Command, channel: Channel) -> Command | Awaitable[Command | None] | None:
        self.requests.append(cmd)
        script = self._scripts.get(cmd.code)
        item: ScriptItem | None = script.popleft() if script else None
        if isinstance(item, Scripted):
            return self._later(cmd, item)
        return self._answer(cmd, item)

    def _answer(self, cmd: Command, item: Command | Responder | None) -> Command | Awaitable[Command | None] | None:
        if isinstance(item, Command):
            return cmd.response(item.code, item.remark, dict(item.ext), item.body)
        responder = item or self._handlers.get(cmd.code) or self._defaults.get(cmd.code)
        if responder is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"mock: no answer for code {cmd.code}")
        return responder(cmd)

    async def _later(self, cmd: Command, item: Scripted) -> Command | None:
        await asyncio.sleep(item.delay)
        result = self._answer(cmd, item.response)
        if inspect.isawaitable(result):
            return await result
        return result

    # --- defaults ----------------------------------------------------------------------------------------

    def _route(self, cmd: Command) -> Command:
        route = self._routes.get(str(cmd.ext.get("topic", "")))
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, "mock: no route for this topic")
        return cmd.response(body=encode_body(route.to_dict()))

    def _send(self, cmd: Command) -> Command:
        queue = self._queue(cmd)
        first = len(queue)
        body = cmd.body_bytes()
        pos = 0
        physical = []
        while pos < len(body):  # a batch is concatenated records
            rec = parse_record(body, pos)
            queue.append(body[pos : pos + rec.total_size])
            physical.append(next(self._physical))
            pos += rec.total_size
        self._arrived.set()
        ext = {"queueId": int(cmd.ext.get("queueId", 0)), "queueOffset": first, "commitLogOffsets": physical}
        return cmd.response(ResponseCode.SUCCESS, ext=ext)

    async def _pull(self, cmd: Command) -> Command:
        ext = cmd.ext
        queue = self._queue(cmd)
        offset = int(ext.get("queueOffset", 0))
        if offset >= len(queue) and int(ext.get("suspendTimeoutMillis", 0)) > 0 and not self._closing:
            # Long polling: hold the pull until something is sent (or the suspend time is up).
            self._arrived.clear()
            try:
                await wait_within(self._arrived.wait(), int(ext["suspendTimeoutMillis"]) / 1000)
            except TimeoutError:
                pass
        if offset > len(queue):
            return cmd.response(ResponseCode.PULL_OFFSET_MOVED, None, _pull_ext(len(queue), len(queue)))
        batch = queue[offset : offset + int(ext.get("maxMsgNums", 32))]
        budget = int(ext.get("maxMsgBytes", 4 * 1024 * 1024))
        for n in range(1, len(batch)):  # as the broker's read: at most maxMsgBytes, at least one record
            budget -= len(batch[n - 1])
            if len(batch[n]) > budget:
                batch = batch[:n]
                break
        if not batch:
            return cmd.response(ResponseCode.PULL_NOT_FOUND, None, _pull_ext(offset, len(queue)))
        ip, _, port = self.address.rpartition(":")
        host = pack_host(ip, int(port))
        records = [_stored(r, int(ext.get("queueId", 0)), offset + i, host) for i, r in enumerate(batch)]
        return cmd.response(ResponseCode.SUCCESS, None, _pull_ext(offset + len(batch), len(queue)), b"".join(records))

    def _heartbeat(self, cmd: Command) -> Command:
        data = decode_body(cmd.body, "heartbeat") if len(cmd.body) else {}
        for c in data.get("consumerDataSet", []):
            self.consumers[str(c["groupName"])].add(str(data.get("clientID", "")))
        return cmd.response()

    def _consumer_list(self, cmd: Command) -> Command:
        ids = sorted(self.consumers.get(str(cmd.ext.get("consumerGroup", "")), ()))
        return cmd.response(body=encode_body({"consumerIdList": ids}))

    def _query_offset(self, cmd: Command) -> Command:
        e = cmd.ext
        offset = self.offsets.get((str(e["consumerGroup"]), str(e["topic"]), int(e["queueId"])))
        if offset is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "mock: no committed offset")
        return cmd.response(ext={"offset": offset})

    def _update_offset(self, cmd: Command) -> Command:
        e = cmd.ext
        self.offsets[(str(e["consumerGroup"]), str(e["topic"]), int(e["queueId"]))] = int(e["commitOffset"])
        return cmd.response()

    def _lock(self, cmd: Command) -> Command:
        body = decode_body(cmd.body, "lock")
        group, client = str(body["consumerGroup"]), str(body["clientId"])
        granted = []
        for d in body.get("mqSet", []):
            mq = MessageQueue.from_dict(d)
            if self.locks.setdefault((group, mq), client) == client:
                granted.append(mq.to_dict())
        return cmd.response(body=encode_body({"lockOKMQSet": granted}))

    def _unlock(self, cmd: Command) -> Command:
        body = decode_body(cmd.body, "unlock")
        group, client = str(body["consumerGroup"]), str(body["clientId"])
        for d in body.get("mqSet", []):
            key = (group, MessageQueue.from_dict(d))
            if self.locks.get(key) == client:
                del self.locks[key]
        return cmd.response()

    def _send_back(self, cmd: Command) -> Command:
        self.sent_back.append(dict(cmd.ext))
        return cmd.response()


def _pull_ext(next_offset: int, max_offset: int) -> dict[str, Any]:
    return {"nextBeginOffset": next_offset, "minOffset": 0, "maxOffset": max_offset}


def _stored(record: bytes, queue_id: int, queue_offset: int, store_host: bytes) -> bytes:
    """The record as a broker would return it: the producer's bytes with the store block filled in."""
    r = parse_record(record)
    return encode_record(
        r.topic,
        bytes(r.body),
        r.properties,
        flag=r.flag,
        sys_flag=r.sys_flag,
        born_timestamp=r.born_timestamp,
        born_host=r.born_host,
        reconsume_times=r.reconsume_times,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=queue_offset,
        store_timestamp=r.born_timestamp,
        store_host=store_host,
    )
