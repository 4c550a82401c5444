"""Helpers for tests on real daemon processes: topics made on each broker, routes waited for."""

from __future__ import annotations

import asyncio
import time

from pymq.client.admin import AdminClient
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.testing import DaemonProcess
from pymq.transport.client import RpcClient


async def create_topic(brokers: list[DaemonProcess], topic: str, queues: int = 4) -> None:
    async with RpcClient() as rpc:
        for b in brokers:
            ext = {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues}
            await rpc.invoke_ok(b.address, Command.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))


async def wait_for_route(namesrv: str, topic: str, brokers: int) -> None:
    """Brokers register a new topic with the nameserver asynchronously: wait until all of them have."""
    async with AdminClient(namesrv) as admin:
        deadline = time.monotonic() + 10
        while True:
            try:
                if len((await admin.topic_route(topic)).brokerDatas) >= brokers:
                    return
            except PymqError:
                pass
            assert time.monotonic() < deadline, f"{topic} not routed to {brokers} brokers within 10 s"
            await asyncio.sleep(0.05)
