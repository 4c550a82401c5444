"""SYNC_FLUSH through the broker: a send is answered only after a disk sync covering it (group commit),
and a sync slower than ``store.sync_flush_timeout_ms`` answers FLUSH_DISK_TIMEOUT with the message stored.

The periodic commitlog flush is pushed out to 60 s, so whatever is on disk when a send
returns was synced because of a send. Each test runs both ways a sync goes: the C syncer
answered on the loop (pymq.broker.sync_flush.loop_sync) and, without the accelerator, the flusher thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from pymq.broker.app import BrokerApp
from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer
from pymq.client.producer import SendResult, SendStatus
from pymq.testing import LocalCluster
from tests.helpers import CheckedThread, wait_until

pytestmark = pytest.mark.integration

SYNC = {"flush_disk_type": "SYNC_FLUSH", "flush_interval_ms": 60_000, "flush_thorough_interval_ms": 60_000}


class SlowFlush:
    """Makes the store's commitlog flush (run on the flusher thread) take ``delay`` seconds longer."""

    def __init__(self, broker: BrokerApp, delay: float) -> None:
        self.mfq = broker.store.commitlog.mfq
        self.real = self.mfq.flush
        self.delay = delay
        self.calls = 0
        self.release = threading.Event()  # set: stop sleeping (so the broker can shut down promptly)

    def __call__(self) -> int:
        self.calls += 1
        self.release.wait(self.delay)
        return self.real()

    def __enter__(self) -> SlowFlush:
        self.mfq.flush = self  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.mfq.flush = self.real  # type: ignore[method-assign]


class SlowSyncer:
    """Makes the C syncer's jobs (SYNC_FLUSH with the accelerator) start ``delay`` seconds late."""

    def __init__(self, broker: BrokerApp, delay: float) -> None:
        assert broker.loop_sync is not None
        self.loop_sync = broker.loop_sync
        self.real = self.loop_sync.syncer
        self.delay = delay
        self.calls = 0
        self.release = threading.Event()
        self.threads: list[CheckedThread] = []

    def submit(self, token: object, ranges: list[tuple[int, int]]) -> None:
        self.calls += 1

        def later() -> None:
            self.release.wait(self.delay)
            self.real.submit(token, ranges)

        t = CheckedThread(later)
        self.threads.append(t)
        t.start()

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def __enter__(self) -> SlowSyncer:
        self.loop_sync.syncer = self  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        try:
            for t in self.threads:
                if exc[0] is None:
                    t.result(10)  # each delayed submit happened (its error, if any, fails the test)
                else:
                    t.join(10)  # (the test already failed: its own error is the one to see)
        finally:
            self.loop_sync.syncer = self.real


def slow_sync(broker: BrokerApp, delay: float) -> SlowFlush | SlowSyncer:
    """Slow syncs down whichever way this broker syncs."""
    return SlowSyncer(broker, delay) if broker.loop_sync is not None else SlowFlush(broker, delay)


def syncs(broker: BrokerApp) -> int:
    """How many syncs ran (C syncer jobs, or the flusher thread's flushes)."""
    if broker.loop_sync is not None:
        return broker.loop_sync.submitted
    flusher = broker.store.services.flusher
    assert flusher is not None and flusher.sync
    return flusher.flush_count


def end_of(broker: BrokerApp, r: SendResult) -> int:
    """Commitlog offset just past the (single) message of ``r``."""
    phys = r.commit_log_offsets[0]
    record = broker.store.read_record(phys)
    assert record is not None
    return phys + len(record)


async def test_sync_flush_send_is_on_disk_when_acknowledged(tmp_path: Path, record_impl: str) -> None:
    """Every SEND_OK under SYNC_FLUSH is covered by the store's flushed (msync'ed) position when it returns."""
    async with LocalCluster(tmp_path / "c", store=SYNC) as cluster:
        await cluster.create_topic("orders", 4)
        broker = cluster.brokers[0]
        store = broker.store
        # the C syncer exactly when the accelerator is in use (Linux)
        assert (broker.loop_sync is not None) == (record_impl == "speedups" and store.syncer is not None)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(20):
                before = syncs(broker)
                r = await p.send(Message("orders", f"durable-{i}".encode() * 50))
                # Checked before anything else runs on the loop: the answer came after the sync.
                assert r.status is SendStatus.SEND_OK
                assert store.flushed_offset >= end_of(broker, r) == store.commitlog.max_offset
                assert syncs(broker) > before, "no sync ran for this send"
                assert store.checkpoint.flushed_phys >= end_of(broker, r)


async def test_sync_flush_group_commit_shares_one_sync(tmp_path: Path, record_impl: str) -> None:
    """Sends waiting together share syncs: 40 concurrent sends, all SEND_OK and on disk, far fewer than 40 syncs."""
    async with LocalCluster(tmp_path / "c", store=SYNC) as cluster:
        await cluster.create_topic("orders", 4)
        broker = cluster.brokers[0]
        async with Producer(cluster.namesrv_addr) as p:
            await p.send(Message("orders", b"warm-up"))  # route and connection ready
            with slow_sync(broker, 0.2) as slow:  # while one sync runs, the others queue up
                results = await asyncio.gather(*(p.send(Message("orders", f"g{i}".encode())) for i in range(40)))
                calls = slow.calls
        assert [r.status for r in results] == [SendStatus.SEND_OK] * 40
        assert broker.store.flushed_offset >= max(end_of(broker, r) for r in results)
        assert 1 <= calls <= 10, f"{calls} syncs for 40 sends"


async def test_slow_disk_answers_flush_disk_timeout_but_keeps_the_message(tmp_path: Path, record_impl: str) -> None:
    """A sync slower than sync_flush_timeout_ms: the producer gets FLUSH_DISK_TIMEOUT, the message is stored once."""
    timeout_ms = 300
    async with LocalCluster(tmp_path / "c", store={**SYNC, "sync_flush_timeout_ms": timeout_ms}) as cluster:
        await cluster.create_topic("orders", 1)
        broker = cluster.brokers[0]
        async with Producer(cluster.namesrv_addr) as p:
            with slow_sync(broker, 3.0):
                t0 = time.monotonic()
                r = await p.send(Message("orders", b"slow-disk", keys=["k-slow"]))
                waited = time.monotonic() - t0
                assert r.status is SendStatus.FLUSH_DISK_TIMEOUT
                assert waited >= timeout_ms / 1000 * 0.9, waited
                assert waited < 2.5, f"the answer waited for the slow sync ({waited:.2f}s)"
                assert broker.store.flushed_offset < end_of(broker, r)  # indeed not on disk yet
            # Stored (once: FLUSH_DISK_TIMEOUT is not retried) and readable; the sync completes later.
            assert broker.store.max_offset("orders", 0) == 1 and r.queue_offset == 0
            await wait_until(lambda: broker.store.flushed_offset >= end_of(broker, r), timeout=10, what="late sync")
            again = await p.send(Message("orders", b"fast-disk"))
            assert again.status is SendStatus.SEND_OK
        pc = PullConsumer(cluster.namesrv_addr, "flush-g", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        pc.subscribe("orders")
        got: list = []
        async with pc:
            deadline = time.monotonic() + 10
            while len(got) < 2 and time.monotonic() < deadline:
                got += await pc.poll(timeout=1.0)
        assert [(m.msg_id, m.body) for m in got] == [(r.msg_id, b"slow-disk"), (again.msg_id, b"fast-disk")]
