"""Clients during an automatic failover (issue 32), on real processes: a nameserver with the
embedded controller, a SYNC_MASTER and its slave in controller mode (the tests' short
timeouts: heartbeat 0.2 s, lease 0.8 s, election after 1.2 s). The clients keep
``poll_namesrv_interval_seconds`` at its 30 s default: they move because the dead master's
silence or a refusal makes them fetch the routes at once.

* a producer's sends succeed on the new master within seconds of kill -9;
* pop receipt handles issued by the old master are accepted by the new one (the group's
  secret) for acks and invisible-time changes; the acked messages do not come back and the
  unacked ones do after their invisible time;
* an orderly consumer locks its queues on the new master and carries on in order.

Each prints the measured move time (docs/REPLICATION.md, "Clients during a failover")."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pymq.client import Message, Producer, PushConsumer, SimpleConsumer, broker_api
from pymq.client.send_result import SendResult, SendStatus
from pymq.errors import PymqError
from pymq.protocol.headers import decode_body
from pymq.protocol.message import MessageExt
from pymq.protocol.requests import LOCK_OK_MQ_SET
from pymq.protocol.route import MessageQueue
from pymq.testing import DaemonProcess
from pymq.transport.client import RpcClient
from tests.controller_group import QUEUES, TOPIC, keep_sending, master_is, start_controlled_group
from tests.helpers import wait_until, wait_until_async

pytestmark = pytest.mark.integration

#: with the tests' controller timeouts a client must be on the new master well before this
MOVE_BOUND = 15.0


async def test_a_producer_moves_to_the_elected_master_within_seconds(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns, master, slave = await start_controlled_group(tmp_path, processes)
    async with Producer(ns, "movers") as producer:  # poll_namesrv_interval_seconds: 30 s
        for i in range(20):
            assert (await producer.send(Message(TOPIC, f"before-{i}".encode()))).store_addr == master.address
        master.kill()  # kill -9
        killed = time.monotonic()
        failures = 0
        first: float | None = None
        while time.monotonic() - killed < 30:
            try:
                result = await producer.send(Message(TOPIC, b"after"))
            except PymqError:
                failures += 1
                await asyncio.sleep(0.05)
                continue
            assert result.store_addr == slave.address
            first = time.monotonic()
            break
    assert first is not None, f"no send succeeded within 30 s ({failures} failed)"
    moved = first - killed
    print(f"producer on the new master {moved:.2f}s after kill -9 ({failures} failed sends)")
    assert await master_is(ns, slave.address)
    assert moved < MOVE_BOUND


async def test_pop_handles_of_the_old_master_are_acked_on_the_new_one(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns, master, slave = await start_controlled_group(tmp_path, processes)
    bodies = {f"job-{i}".encode() for i in range(4)}
    async with Producer(ns, "pop-p") as producer:
        for body in sorted(bodies):
            await producer.send(Message(TOPIC, body))
    consumer = SimpleConsumer(ns, "workers", await_duration=0)
    consumer.subscribe(TOPIC)
    async with consumer:
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < len(bodies) and time.monotonic() < deadline:
            got += await consumer.receive(16, invisible_duration=8.0, await_duration=0.5)
        popped = time.monotonic()
        assert {m.body for m in got} == bodies and all(m.store_host == master.address for m in got)
        await asyncio.sleep(1.0)  # the checkpoints replicated, the slave's copy of the metadata taken
        master.kill()
        killed = time.monotonic()
        await wait_until_async(lambda: master_is(ns, slave.address), timeout=10, what="the slave elected")
        acked, held, kept = got[:2], got[2], got[3:]
        for msg in acked:
            while True:  # the first ack may still go to the dead master: the routes are fetched then
                try:
                    await consumer.ack(msg)
                    break
                except PymqError as exc:
                    assert "INVALID_RECEIPT_HANDLE" not in str(exc) and time.monotonic() - killed < MOVE_BOUND, exc
                    await asyncio.sleep(0.1)
        ack_moved = time.monotonic() - killed
        old_handle = held.receipt_handle
        await consumer.change_invisible_duration(held, 60.0)  # the old master's handle, on the new master
        assert held.receipt_handle != old_handle
        # the unacked come back from the new master after their invisible time; the acked do not
        back: list[Any] = []
        deadline = popped + 8.0 + 10
        while time.monotonic() < deadline and len(back) < len(kept):
            back += await consumer.receive(16, invisible_duration=30.0, await_duration=0.5)
        settle = time.monotonic() + 2.0
        while time.monotonic() < settle:
            back += await consumer.receive(16, invisible_duration=30.0, await_duration=0.3)
    # the acked and the one held invisible for 60 s do not come back
    assert sorted(m.body for m in back) == sorted(m.body for m in kept)
    assert all(m.store_host == slave.address and m.reconsume_times == 1 for m in back)
    print(f"old master's handles acked on the new master {ack_moved:.2f}s after kill -9")


async def test_an_orderly_consumer_relocks_on_the_new_master_and_keeps_the_order(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns, master, slave = await start_controlled_group(tmp_path, processes)
    seen: dict[int, list[str]] = defaultdict(list)
    consumed_at: dict[str, float] = {}

    def listener(msgs: list[MessageExt]) -> None:
        for m in msgs:
            body = m.body.decode()
            seen[m.queue_id].append(body)
            consumed_at.setdefault(body, time.monotonic())

    # its own client instance: the producer's route fetches must not move it
    consumer = PushConsumer(ns, "orderly-movers", instance_name="orderly-consumer")
    consumer.subscribe(TOPIC)
    consumer.register_orderly_listener(listener)
    async with consumer, Producer(ns, "orderly-p") as producer:
        for i in range(10):
            for q in range(QUEUES):
                mq = MessageQueue(TOPIC, "broker-a", q)
                await producer.send(Message(TOPIC, f"before-{q}-{i}".encode()), queue=mq)
        await wait_until(lambda: all(len(seen[q]) >= 10 for q in range(QUEUES)), timeout=15, what="consumed before")
        master.kill()
        killed = time.monotonic()
        after = 10
        sent_at: dict[str, float] = {}
        for i in range(after):
            for q in range(QUEUES):
                body = f"after-{q}-{i}"
                while True:  # the application's retry: the same message until it is stored
                    try:
                        await producer.send(Message(TOPIC, body.encode()), queue=MessageQueue(TOPIC, "broker-a", q))
                        break
                    except PymqError:
                        assert time.monotonic() - killed < 30, "no send succeeded within 30 s"
                        await asyncio.sleep(0.05)
                sent_at.setdefault(body, time.monotonic())
        await wait_until(
            lambda: all(sum(b.startswith("after-") for b in seen[q]) >= after for q in range(QUEUES)),
            timeout=30,
            what="consumed after the failover",
        )
        pqs = {mq: pq for mq, pq in consumer.process_queues.items() if mq.topic == TOPIC}  # not the retry topic's
        assert sorted(pqs) == [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]
        relocked = max(pq.last_lock_time for pq in pqs.values()) - killed
        # the new master holds the locks for this consumer: another client of the group gets none
        async with RpcClient() as rpc:
            lock = broker_api.lock_batch("orderly-movers", "intruder@1", list(pqs))
            answer = await rpc.invoke_ok(slave.address, lock)
        assert decode_body(answer.body).get(LOCK_OK_MQ_SET) == []
    for q in range(QUEUES):
        afters = [int(b.rsplit("-", 1)[1]) for b in seen[q] if b.startswith("after-")]
        assert afters == sorted(afters) and set(afters) == set(range(after)), (q, afters)
    first_consumed = min(consumed_at[b] for b in sent_at) - killed
    lag = max(consumed_at[b] - sent_at[b] for b in sent_at)
    print(
        f"orderly consumer: locks re-taken on the new master {relocked:.2f}s after kill -9, first message "
        f"consumed there {first_consumed:.2f}s (first stored {min(sent_at.values()) - killed:.2f}s); "
        f"longest send-to-consume {lag:.2f}s"
    )
    assert 0 < relocked < MOVE_BOUND and first_consumed < MOVE_BOUND


async def test_kill_9_under_eight_sync_producers_the_consumer_carries_on(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    """kill -9 of the master under 8 SYNC producers and a push consumer: the slave is elected, the
    producers carry on there, and the consumer gets every acknowledged message and every message
    the new master stored, without a restart."""
    ns, master, slave = await start_controlled_group(tmp_path, processes)
    acked: set[bytes] = set()
    on_new: set[bytes] = set()  # answered by the new master (SLAVE_NOT_AVAILABLE or SEND_OK: stored)
    consumed: set[bytes] = set()
    killed_at: list[float] = []
    done = asyncio.Event()

    def listener(msgs: list[MessageExt]) -> None:
        consumed.update(m.body for m in msgs)

    def on_result(body: bytes, result: SendResult) -> None:
        if result.status is SendStatus.SEND_OK:
            acked.add(body)
        if killed_at and result.store_addr == slave.address:
            on_new.add(body)

    consumer = PushConsumer(ns, "kill-movers", instance_name="kill-consumer")
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    async with consumer, Producer(ns, "kill8") as producer:
        senders = [asyncio.ensure_future(keep_sending(producer, f"k{p}", done, on_result)) for p in range(8)]
        try:
            await wait_until(lambda: len(acked) >= 200 and len(consumed) >= 100, timeout=20, what="traffic")
            master.kill()  # kill -9
            killed_at.append(time.monotonic())
            await wait_until(lambda: len(on_new) >= 200, timeout=20, what="200 sends stored by the new master")
        finally:
            done.set()
            await asyncio.gather(*senders)
        want = acked | on_new
        await wait_until(lambda: want <= consumed, timeout=30, what="the consumer to get every stored message")
    assert await master_is(ns, slave.address)
    print(f"kill -9 under 8 producers: {len(acked)} acked, {len(on_new)} on the new master, {len(consumed)} consumed")
