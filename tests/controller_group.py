"""A broker group under the failover controller for the controller tests (issue 32): the daemons'
short timeouts, the CONTROLLER_STATUS questions the tests ask, a raw send and a full read-back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer
from pymq.client.send_result import SendResult
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.record import encode_record
from pymq.protocol.requests import SendMessageRequest
from pymq.protocol.route import MessageQueue
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from tests.helpers import wait_until_async
from tests.master_slave import group_addrs

TOPIC = "failover"
QUEUES = 2
CONTROLLER = ["--controller", "embedded", "--controller-master-timeout", "1.2", "--controller-lease", "0.8"]
BROKER_ENV = {
    "PYMQ_CONTROLLER_HEARTBEAT_SECONDS": "0.2",
    "PYMQ_SLAVE_SYNC_INTERVAL_SECONDS": "0.5",
    "PYMQ_REGISTER_INTERVAL_SECONDS": "2",
    "PYMQ_SLAVE_ACK_TIMEOUT_MS": "1000",
}


async def controller_status(ns: str) -> dict[str, Any]:
    async with RpcClient() as rpc:
        resp = await rpc.invoke_ok(ns, Command.request(RequestCode.CONTROLLER_STATUS), timeout=3.0)
    status: dict[str, Any] = decode_body(resp.body)
    return status


async def create_topic(addr: str) -> None:
    async with RpcClient() as rpc:
        ext = {"topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
        await rpc.invoke_ok(addr, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))


async def in_sync(ns: str, slave: str) -> bool:
    group = (await controller_status(ns))["groups"].get("broker-a") or {}
    return slave in group.get("syncSet", [])


async def master_is(ns: str, addr: str) -> bool:
    return bool((await controller_status(ns))["groups"]["broker-a"]["master"] == addr)


def raw_send(body: bytes) -> Command:
    """A SEND_MESSAGE of ``body`` to queue 0, for a broker asked directly (no producer, no retry)."""
    record = encode_record(TOPIC.encode(), body, b"", born_timestamp=int(time.time() * 1000))
    return Command.request(RequestCode.SEND_MESSAGE, SendMessageRequest(topic=TOPIC, queue_id=0).to_ext(), record)


async def read_everything(ns: str, want: set[bytes], timeout: float = 15.0) -> set[bytes]:
    """The bodies read from every queue of the group from the first offset, until ``want`` is read."""
    pc = PullConsumer(ns, f"reader-{time.monotonic_ns()}", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)])
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout
    async with pc:
        while not want <= got and time.monotonic() < deadline:
            got.update(m.body for m in await pc.poll(timeout=0.5))
    return got


async def start_controlled_group(
    tmp_path: Path, processes: list[DaemonProcess]
) -> tuple[str, DaemonProcess, DaemonProcess]:
    """A controller nameserver, a SYNC_MASTER and its slave in controller mode, the slave in sync
    and both routed; ``processes`` gets every daemon (stopped by PID by its fixture)."""
    ns = namesrv_process(tmp_path, *CONTROLLER, "--controller-dir", str(tmp_path / "ctl")).start()
    processes.append(ns)
    master = broker_process(tmp_path / "m", ns.address, "broker-a", "--role", "SYNC_MASTER", "--controller-mode",
                            env=BROKER_ENV).start()  # fmt: skip
    processes.append(master)
    await create_topic(master.address)
    slave = broker_process(tmp_path / "s", ns.address, "broker-a", "--role", "SLAVE", "--broker-id", "1",
                           "--controller-mode", env=BROKER_ENV).start()  # fmt: skip
    processes.append(slave)
    await wait_until_async(lambda: in_sync(ns.address, slave.address), timeout=15, what="slave in the sync-state set")

    async def routed() -> bool:
        return await group_addrs(ns.address, TOPIC, "broker-a") == {0: master.address, 1: slave.address}

    await wait_until_async(routed, timeout=15, what="group routed")
    return ns.address, master, slave


async def keep_sending(
    producer: Producer, prefix: str, done: asyncio.Event, on_result: Callable[[bytes, SendResult], None]
) -> None:
    """One SYNC producer at work (~100 sends/s) until ``done``: each answer goes to ``on_result``; a
    failed send (a master gone, no route yet) is retried with the next body after 50 ms."""
    i = 0
    while not done.is_set():
        body = f"{prefix}-{i}".encode()
        i += 1
        try:
            result = await producer.send(Message(TOPIC, body), timeout=3.0)
        except PymqError:
            await asyncio.sleep(0.05)
            continue
        on_result(body, result)
        await asyncio.sleep(0.01)  # producers at work, not a flood to read back
