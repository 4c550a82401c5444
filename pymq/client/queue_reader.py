"""A small blocking reader of queues by offset range, for code that plans its own reads (Spark).

Unlike the consumers it keeps no group state: it lists queues, reads min/max offsets, finds
offsets by time, reads the raw records of ``[start, end)`` from one queue, and commits
offsets for a group when asked. Each instance runs its own private event loop, so it works
in any thread or process without an application loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from pymq.client import broker_api
from pymq.client.namesrv import NamesrvClient, parse_addrs
from pymq.client.routes import read_queues
from pymq.client.security import Security
from pymq.errors import (
    ClientError,
    PymqError,
    QueryNotFoundError,
    ServiceNotAvailableError,
    SystemBusyError,
    TopicNotExistError,
    TransportError,
    error_for_response,
)
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.record import records_before
from pymq.protocol.route import MessageQueue, TopicRouteData
from pymq.transport.client import RpcClient
from pymq.transport.loop import new_event_loop

#: (topic, brokerName, queueId)
QueueKey = tuple[str, str, int]

#: group name used for reads that commit nothing
READER_GROUP = "PYMQ_READER"
MAX_PULL = 1024

#: errors that mean "this broker cannot answer right now" (stopped, restarting, unreachable,
#: gone from the route), as opposed to a bad request
UNAVAILABLE = (TransportError, ServiceNotAvailableError, SystemBusyError, ClientError, TopicNotExistError)


class OffsetsLostError(PymqError):
    """The range asked for starts below the queue's min offset: those messages were deleted."""


class QueueReader:
    def __init__(self, namesrv: str | list[str], *, timeout: float = 10.0, **security: Any) -> None:
        """``security``: access_key, secret_key, tls, tls_ca_file ... (see pymq.client.security)."""
        addrs = parse_addrs(namesrv)
        options = Security.from_options(security).rpc_options(addrs)
        self._loop = new_event_loop()
        self.timeout = timeout
        self._rpc = RpcClient(connect_timeout=timeout, **options)
        self._ns = NamesrvClient(self._rpc, addrs, timeout)
        self._routes: dict[str, TopicRouteData] = {}

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self._rpc.close())
            self._loop.close()

    def __enter__(self) -> QueueReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- metadata -------------------------------------------------------------------------------------------

    async def _route(self, topic: str, refresh: bool = False) -> TopicRouteData:
        if refresh or topic not in self._routes:
            self._routes[topic] = await self._ns.route(topic)
        return self._routes[topic]

    async def _addr(self, topic: str, broker: str, *, master: bool = False) -> str | None:
        for refresh in (False, True):
            bd = (await self._route(topic, refresh)).broker(broker)
            addr = (bd.master_addr if master else bd.select_addr()) if bd else None
            if addr:
                return addr
        if master:
            return None
        raise ClientError(f"no address for broker {broker} of topic {topic}")

    def topics(self) -> list[str]:
        """Every topic the nameservers know, sorted."""
        names: list[str] = self._run(self._ns.topics())
        return sorted(names)

    def queues(self, topics: list[str], *, missing_ok: bool = False) -> list[QueueKey]:
        """Every readable queue of the topics, sorted (routes are refreshed).

        ``missing_ok``: a topic no nameserver routes (e.g. all its brokers are down) has no
        queues instead of raising :class:`TopicNotExistError`.
        """

        async def all_() -> list[QueueKey]:
            out: list[QueueKey] = []
            for topic in topics:
                try:
                    route = await self._route(topic, True)
                except TopicNotExistError:
                    if not missing_ok:
                        raise
                    continue
                out.extend((mq.topic, mq.brokerName, mq.queueId) for mq in read_queues(topic, route))
            return sorted(out)

        queues: list[QueueKey] = self._run(all_())
        return queues

    async def _offset(self, code: int, key: QueueKey, timestamp: int | None = None) -> int:
        addr = await self._addr(key[0], key[1])
        assert addr is not None
        cmd = broker_api.queue_offset(code, key[0], key[2], timestamp)
        resp = await self._rpc.invoke_ok(addr, cmd, self.timeout)
        return int(resp.ext["offset"])

    def min_max(self, keys: list[QueueKey], *, skip_unavailable: bool = False) -> dict[QueueKey, tuple[int, int]]:
        """``(min offset, max offset)`` of each queue.

        ``skip_unavailable``: leave out the queues whose broker cannot answer now (see
        :data:`UNAVAILABLE`) instead of raising; other errors still raise.
        """

        async def both(k: QueueKey) -> tuple[int, int]:
            lo, hi = await asyncio.gather(
                self._offset(RequestCode.GET_MIN_OFFSET, k), self._offset(RequestCode.GET_MAX_OFFSET, k)
            )
            return lo, hi

        async def all_() -> list[Any]:
            return await asyncio.gather(*(both(k) for k in keys), return_exceptions=skip_unavailable)

        out: dict[QueueKey, tuple[int, int]] = {}
        for key, result in zip(keys, self._run(all_()), strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, UNAVAILABLE):
                    raise result
                continue
            out[key] = result
        return out

    def offsets_for_time(self, keys: list[QueueKey], timestamp: int) -> dict[QueueKey, int]:
        """The first offset stored at or after ``timestamp`` (ms) in each queue."""

        async def all_() -> list[int]:
            return await asyncio.gather(
                *(self._offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, k, timestamp) for k in keys)
            )

        return dict(zip(keys, self._run(all_()), strict=True))

    # --- reading --------------------------------------------------------------------------------------------

    def read_range(
        self,
        key: QueueKey,
        start: int,
        end: int,
        *,
        tags: str = "*",
        fail_on_data_loss: bool = True,
        unavailable_for: float | None = None,
    ) -> Iterator[tuple[bytes | memoryview, int]]:
        """Yield ``(records, next_offset)`` chunks of raw records covering ``[start, end)`` of one queue.

        Records past ``end`` are never returned. If ``start`` was deleted by cleanup, raise
        :class:`OffsetsLostError` or, with ``fail_on_data_loss=False``, continue from the
        oldest offset still stored. A broker that cannot answer (stopping, restarting) is
        retried, with the route refreshed, for up to ``unavailable_for`` seconds (default:
        the reader's timeout) before its error is raised.
        """
        topic, broker, qid = key
        patience = self.timeout if unavailable_for is None else unavailable_for
        mq = MessageQueue(topic, broker, qid)

        def pull_from(at: int) -> asyncio.Task[Command]:
            # One pull stays in flight while the caller works on the previous answer: the
            # broker reads and sends the next chunk meanwhile (its answer waits in the socket).
            cmd = broker_api.pull_message(READER_GROUP, mq, at, max_nums=min(MAX_PULL, end - at), tags=tags)
            task = self._loop.create_task(self._pull_patiently(topic, broker, cmd, patience))
            self._run(asyncio.sleep(0))  # runs the task up to its request being written
            return task

        offset = start
        in_flight = pull_from(offset) if offset < end else None
        try:
            while in_flight is not None:
                resp = self._run(in_flight)
                in_flight = None
                nxt = int(resp.ext.get("nextBeginOffset", offset))
                body: bytes | memoryview | None = None
                if resp.code == ResponseCode.SUCCESS:
                    body = resp.body
                    if nxt > end:
                        # The broker went past the range: a tag filter scans on until it has
                        # maxMsgNums matches, and removed entries do not count. Drop what is
                        # at or past ``end`` (the next range reads it).
                        body = records_before(body, end)
                elif resp.code == ResponseCode.PULL_OFFSET_MOVED:
                    low = int(resp.ext.get("minOffset", 0))
                    if offset < low:
                        if fail_on_data_loss:
                            raise OffsetsLostError(
                                f"{topic}/{broker}/{qid}: offsets {offset}..{low - 1} were deleted from the broker "
                                f"(set failOnDataLoss=false to skip them)"
                            )
                        nxt = low
                    else:
                        raise OffsetsLostError(f"{topic}/{broker}/{qid}: offset {offset} is past the queue's end")
                elif resp.code == ResponseCode.PULL_NOT_FOUND:
                    break  # nothing more (the end was past the max offset)
                elif resp.code != ResponseCode.PULL_RETRY_IMMEDIATELY:
                    raise error_for_response(resp.code, resp.remark)
                if nxt <= offset:
                    if body is not None:
                        yield body, min(nxt, end)
                    break
                offset = nxt
                if offset < end:
                    in_flight = pull_from(offset)
                if body is not None:
                    yield body, min(nxt, end)
        finally:
            if in_flight is not None and not self._loop.is_closed():
                in_flight.cancel()
                self._run(asyncio.gather(in_flight, return_exceptions=True))

    async def _pull(self, topic: str, broker: str, cmd: Command) -> Command:
        addr = await self._addr(topic, broker)
        assert addr is not None
        return await self._rpc.invoke(addr, cmd, self.timeout)

    async def _pull_patiently(self, topic: str, broker: str, cmd: Command, patience: float) -> Command:
        """``_pull``, retried while the broker is unavailable (it may be restarting, at a new address)."""
        deadline = time.monotonic() + patience
        delay = 0.1
        while True:
            try:
                return await self._pull(topic, broker, cmd)
            except UNAVAILABLE:
                if time.monotonic() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
            try:
                await self._route(topic, refresh=True)
            except PymqError:
                pass  # the nameservers may not route the topic again yet: retry later

    # --- group offsets --------------------------------------------------------------------------------------

    def commit(self, group: str, offsets: dict[QueueKey, int]) -> list[QueueKey]:
        """Store ``offsets`` (next offset to read) as the group's committed offsets on the masters.

        Offsets are the masters': the queues whose master is not in the route (stopped, or
        away with only a slave left) are not committed and are returned, sorted, so the
        caller can keep their offsets and commit them again later. Other failures raise,
        after every queue was tried.
        """

        async def one(key: QueueKey, off: int) -> bool:
            topic, broker, qid = key
            addr = await self._addr(topic, broker, master=True)
            if addr is None:
                return False
            await self._rpc.invoke_ok(addr, broker_api.update_consumer_offset(group, topic, qid, off), self.timeout)
            return True

        async def all_() -> list[QueueKey]:
            # Every queue is tried (one stopped broker must not hold back the others' offsets);
            # then the first failure is raised.
            keys = list(offsets)
            results = await asyncio.gather(*(one(k, offsets[k]) for k in keys), return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            return sorted(k for k, ok in zip(keys, results, strict=True) if not ok)

        masterless: list[QueueKey] = self._run(all_())
        return masterless

    def committed(self, group: str, key: QueueKey) -> int:
        """The group's committed offset for a queue, -1 if none (from a slave's copy while the master is away)."""
        topic, broker, qid = key

        async def query() -> int:
            addr = await self._addr(topic, broker)
            assert addr is not None  # _addr raises when there is none
            try:
                resp = await self._rpc.invoke_ok(
                    addr, broker_api.query_consumer_offset(group, topic, qid), self.timeout
                )
            except QueryNotFoundError:
                return -1
            return int(resp.ext["offset"])

        offset: int = self._run(query())
        return offset
