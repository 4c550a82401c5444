"""The benchmark workloads: produce, consume, and produce+consume (end-to-end latency)."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

from pymq.bench.stats import Recorder
from pymq.client import ConsumeFromWhere, ConsumeResult, Message, Producer, PushConsumer
from pymq.client.admin import AdminClient
from pymq.client.namesrv import NamesrvClient, parse_addrs
from pymq.client.routes import read_queues
from pymq.client.security import Security
from pymq.client.transaction_producer import TransactionProducer, TransactionState
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.transport.client import RpcClient

#: property carrying the send time in ns, for end-to-end latency
SENT_NS = "bench_sent_ns"

#: credentials and TLS options every client of this run takes (access_key, secret_key, tls ...;
#: see pymq.client.security); pymq-bench fills it from its options
CLIENT_OPTIONS: dict[str, Any] = {}


def _rpc(namesrv: str) -> RpcClient:
    return RpcClient(**Security.from_options(CLIENT_OPTIONS).rpc_options(parse_addrs(namesrv)))


@dataclass
class ProducerSpec:
    namesrv: str
    topic: str
    body_size: int = 1024
    batch_size: int = 1
    concurrency: int = 1
    count: int | None = None
    duration: float | None = None
    mode: str = "sync"  # sync | async | oneway | transaction
    #: messages per second across all workers; 0 = as fast as possible
    rate: float = 0.0
    max_in_flight: int = 8


async def topic_max_offsets(namesrv: str, topic: str) -> int:
    """Sum of the max offsets of every queue of a topic (messages ever stored in it)."""
    async with _rpc(namesrv) as rpc:
        route = await NamesrvClient(rpc, parse_addrs(namesrv)).route(topic)
        total = 0
        for mq in read_queues(topic, route):
            bd = route.broker(mq.brokerName)
            addr = bd.select_addr() if bd else None
            if addr is None:
                continue
            ext = {"topic": topic, "queueId": mq.queueId}
            resp = await rpc.invoke_ok(addr, Command.request(RequestCode.GET_MAX_OFFSET, ext))
            total += int(resp.ext["offset"])
        return total


async def group_backlog(namesrv: str, group: str, topic: str) -> tuple[int, int]:
    """(messages the group has not consumed yet, its committed offsets summed) on ``topic``.

    A queue the group never committed counts from the queue's min offset (FIRST_OFFSET).
    """
    async with AdminClient(namesrv, **CLIENT_OPTIONS) as admin:
        rows = (await admin.consumer_progress(group, topic))["queues"]
        backlog = committed = 0
        for row in rows:
            start = row["consumerOffset"] if row["consumerOffset"] >= 0 else row.get("minOffset", 0)
            backlog += max(0, row["brokerOffset"] - start)
            committed += max(0, row["consumerOffset"])
        return backlog, committed


async def ensure_topic(namesrv: str, topic: str, queues: int = 8) -> None:
    """Create the topic on every master that lacks it (benchmarks need no manual setup)."""
    async with _rpc(namesrv) as rpc:
        ns = NamesrvClient(rpc, parse_addrs(namesrv))
        if await ns.route_or_none(topic) is not None:
            return
        info = await ns.cluster_info()
        for bd in info.get("brokerAddrTable", {}).values():
            addr = bd.get("brokerAddrs", {}).get(0) or bd.get("brokerAddrs", {}).get("0")
            if addr:
                ext = {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues}
                await rpc.invoke_ok(addr, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
        deadline = time.monotonic() + 10
        while await ns.route_or_none(topic) is None:
            if time.monotonic() > deadline:
                raise PymqError(f"topic {topic} did not appear in the nameserver routes")
            await asyncio.sleep(0.1)


class _Pacer:
    """Spreads sends evenly to hold a target rate (messages per second)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next = time.perf_counter()

    async def wait(self, n: int) -> None:
        if not self.interval:
            return
        self.next += self.interval * n
        delay = self.next - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


async def run_producers(spec: ProducerSpec, recorders: list[Recorder]) -> None:
    """Fill one recorder per worker; each worker has its own client (its own connections)."""
    body = os.urandom(spec.body_size)
    deadline = time.perf_counter() + spec.duration if spec.duration else None
    remaining = [spec.count if spec.count is not None else -1]
    pacer = _Pacer(spec.rate)

    def take(n: int) -> int:
        if deadline is not None and time.perf_counter() >= deadline:
            return 0
        if remaining[0] < 0:
            return n
        n = min(n, remaining[0])
        remaining[0] -= n
        return n

    async def worker(i: int, rec: Recorder) -> None:
        name = f"bench-{os.getpid()}-{i}"
        if spec.mode == "transaction":
            await _transaction_worker(spec, f"bench-tx-producer-{i}", name, body, take, pacer, rec)
            return
        async with Producer(spec.namesrv, f"bench-producer-{i}", instance_name=name, **CLIENT_OPTIONS) as producer:
            in_flight = asyncio.Semaphore(spec.max_in_flight)
            pending: set[asyncio.Task[Any]] = set()
            if spec.mode == "sync" and spec.batch_size == 1 and not spec.rate:
                # The plain W2/W4 loop, as lean as the peers' own (no pacer, no per-send list or
                # timing coroutine): what is measured is a Message built and sent per iteration.
                await _plain_sends(producer, spec.topic, body, take, rec)
                rec.stop()
                return
            while n := take(spec.batch_size):
                await pacer.wait(n)
                props = {SENT_NS: str(time.time_ns())} if spec.rate else {}
                msgs = [Message(spec.topic, body, properties=props) for _ in range(n)]
                if spec.mode == "oneway":
                    try:
                        for m in msgs:
                            await producer.send_oneway(m)
                        rec.ok(n)
                    except PymqError:
                        rec.fail(n)
                elif spec.mode == "async":
                    await in_flight.acquire()
                    task = asyncio.ensure_future(_timed_send(producer, msgs, rec))
                    task.add_done_callback(lambda _t: in_flight.release())
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                else:
                    await _timed_send(producer, msgs, rec)
            if pending:
                await asyncio.gather(*pending)
        rec.stop()

    await asyncio.gather(*(worker(i, r) for i, r in enumerate(recorders)))


def _commit(msg: Message, arg: object) -> TransactionState:
    return TransactionState.COMMIT


async def _transaction_worker(
    spec: ProducerSpec, group: str, name: str, body: bytes, take: Any, pacer: _Pacer, rec: Recorder
) -> None:
    """Transactional sends, one at a time: half send, an empty local transaction, oneway commit."""
    async with TransactionProducer(
        spec.namesrv, group, lambda m: TransactionState.COMMIT, instance_name=name, **CLIENT_OPTIONS
    ) as p:
        while take(1):
            await pacer.wait(1)
            props = {SENT_NS: str(time.time_ns())} if spec.rate else {}
            t0 = time.perf_counter()
            try:
                await p.send_in_transaction(Message(spec.topic, body, properties=props), _commit)
            except PymqError:
                rec.fail(1)
                continue
            rec.ok(1, time.perf_counter() - t0)
    rec.stop()


async def wait_stored(namesrv: str, topic: str, before: int, expect: int, timeout: float = 10.0) -> int:
    """Messages stored on ``topic`` since ``before``, once ``expect`` have landed (or ``timeout`` passed).

    Transactional commits are oneway: the last of them land just after the last send returned.
    """
    deadline = time.monotonic() + timeout
    while (stored := await topic_max_offsets(namesrv, topic) - before) < expect and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return stored


async def _plain_sends(producer: Producer, topic: str, body: bytes, take: Any, rec: Recorder) -> None:
    """Single awaited sends of one fresh Message each, until ``take`` says stop."""
    pc = time.perf_counter
    send = producer.send
    latencies = rec.latencies
    while take(1):
        t0 = pc()
        try:
            await send(Message(topic, body))
        except PymqError:
            rec.fail(1)
            continue
        latencies.append(pc() - t0)
        rec.messages += 1


async def _timed_send(producer: Producer, msgs: list[Message], rec: Recorder) -> None:
    t0 = time.perf_counter()
    try:
        if len(msgs) == 1:
            await producer.send(msgs[0])
        else:
            await producer.send_batch(msgs)
    except PymqError:
        rec.fail(len(msgs))
        return
    rec.ok(len(msgs), time.perf_counter() - t0)


async def run_consumer(
    namesrv: str,
    topic: str,
    group: str,
    rec: Recorder,
    *,
    duration: float | None,
    expect: int | None = None,
    batch_size: int = 32,
    e2e: bool = False,
    since_ns: int = 0,
    idle_stop: float = 2.0,
    orderly: bool = False,
    fail_first: bool = False,
) -> PushConsumer:
    """Consume until ``expect`` messages arrived, ``duration`` passed, or nothing came for ``idle_stop`` s.

    ``fail_first``: the listener fails every first delivery, so each message takes the retry
    path once (send-back, delay, redelivery); ``rec`` then counts send-backs.
    """
    consumer = PushConsumer(
        namesrv,
        group,
        instance_name=f"bench-consumer-{os.getpid()}",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        consume_batch_max_size=batch_size,
        **CLIENT_OPTIONS,
    )
    consumer.subscribe(topic)
    last = [time.perf_counter()]

    async def on(msgs: list[Any]) -> Any:
        now_ns = time.time_ns()
        if e2e:
            # Only this run's messages count: the topic may hold older ones (a fresh group
            # starts from the first offset).
            fresh = 0
            for m in msgs:
                sent = int(m.properties.get(SENT_NS) or 0)
                if sent >= since_ns:
                    rec.latencies.append((now_ns - sent) / 1e9)
                    fresh += 1
            rec.messages += fresh
            last[0] = time.perf_counter()
            return None
        last[0] = time.perf_counter()
        if fail_first:
            first = [m for m in msgs if m.reconsume_times == 0]
            rec.messages += len(first)
            return ConsumeResult.RECONSUME_LATER if first else ConsumeResult.SUCCESS
        rec.messages += len(msgs)
        return None

    if orderly:
        consumer.register_orderly_listener(on)
    else:
        consumer.register_listener(on)

    await consumer.start()
    rec.started = time.perf_counter()
    deadline = rec.started + duration if duration else None
    while True:
        await asyncio.sleep(0.05)
        now = time.perf_counter()
        if expect is not None and rec.messages >= expect:
            break
        if deadline is not None and now >= deadline:
            break
        # Without a count or a duration, stop once nothing came for idle_stop s; before the
        # first message allow for joining the group and the first rebalance.
        if expect is None and duration is None and now - last[0] > (idle_stop if rec.messages else 10 + idle_stop):
            break
    if fail_first and expect is not None:
        # The listener has seen every first delivery; the send-backs end when no message of
        # the original queues is still held by the client (each left only once the broker
        # acknowledged its send-back).
        while any(pq.count for mq, pq in consumer.process_queues.items() if mq.topic == topic):
            await asyncio.sleep(0.005)
        last[0] = time.perf_counter()
    rec.finished = last[0] if expect is not None and rec.messages >= expect else time.perf_counter()
    return consumer
