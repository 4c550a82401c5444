"""QueueReader (the Spark connector's reader) against real daemons: brokers that go away and come back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pymq.client.queue_reader import UNAVAILABLE, QueueReader
from pymq.client.sync import Message, Producer
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.record import iter_records
from pymq.protocol.route import MessageQueue
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from pymq.transport.loop import run
from tests.daemon_helpers import wait_for_route
from tests.helpers import CheckedThread

pytestmark = pytest.mark.integration


async def _create_topic(addr: str, topic: str) -> None:
    async with RpcClient() as rpc:
        ext = {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1}
        await rpc.invoke_ok(addr, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))


def _one_queue_with(
    tmp_path: Path, processes: list[DaemonProcess], topic: str, count: int
) -> tuple[DaemonProcess, DaemonProcess, tuple[str, str, int]]:
    """A nameserver and broker-a (real processes) whose one-queue ``topic`` holds ``count`` messages."""
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    broker = broker_process(tmp_path, ns.address, "broker-a").start()
    processes.append(broker)
    run(_create_topic(broker.address, topic))
    run(wait_for_route(ns.address, topic, 1))  # (brokers register a new topic asynchronously)
    key = (topic, "broker-a", 0)
    with Producer(ns.address, f"qr-{topic}") as p:
        for i in range(count):
            p.send(Message(topic, b"m%d" % i), queue=MessageQueue(*key))
    return ns, broker, key


def test_read_range_waits_for_a_restarting_broker(tmp_path: Path, processes: list[DaemonProcess]) -> None:
    """A range on a stopped broker is read once the broker is back (on a new port); given less patience than
    the restart takes, the reader gives up with an 'unavailable' error. min_max can skip such queues."""
    ns, broker, key = _one_queue_with(tmp_path, processes, "back", 30)
    broker.stop()
    with QueueReader(ns.address, timeout=5) as reader:
        with pytest.raises(UNAVAILABLE):
            list(reader.read_range(key, 0, 30, unavailable_for=0.5))
        assert reader.min_max([key], skip_unavailable=True) == {}

    def restart() -> None:
        time.sleep(1.5)
        processes.append(broker_process(tmp_path, ns.address, "broker-a").start())

    later = CheckedThread(restart)
    later.start()
    try:
        with QueueReader(ns.address, timeout=20) as reader:
            chunks = list(reader.read_range(key, 0, 30))
            assert reader.min_max([key], skip_unavailable=True) == {key: (0, 30)}
    finally:
        later.result(60)  # the restart itself succeeded
    assert sum(len(list(iter_records(body))) for body, _ in chunks) == 30


def test_read_range_keeps_one_pull_ahead_and_stops_cleanly(
    tmp_path: Path, processes: list[DaemonProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small pulls, each asked for before the previous chunk is handed out: every offset once, in order; a
    caller that stops early leaves no pull behind and the reader keeps working."""
    monkeypatch.setattr("pymq.client.queue_reader.MAX_PULL", 7)
    ns, _broker, key = _one_queue_with(tmp_path, processes, "ahead", 50)
    with QueueReader(ns.address, timeout=10) as reader:
        chunks = list(reader.read_range(key, 3, 45))
        offsets = [r[9] for body, _ in chunks for r in iter_records(body)]
        assert offsets == list(range(3, 45)) and [nxt for _, nxt in chunks][-1] == 45
        assert len(chunks) == 6  # 42 records, 7 per pull
        partial = reader.read_range(key, 0, 50)
        first, _ = next(partial)
        partial.close()  # a pull was in flight: cancelled and awaited
        assert [r[9] for r in iter_records(first)] == list(range(7))
        assert not [t for t in asyncio.all_tasks(reader._loop) if not t.done()]
        assert sum(len(list(iter_records(b))) for b, _ in reader.read_range(key, 40, 50)) == 10
