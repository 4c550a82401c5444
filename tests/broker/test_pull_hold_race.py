"""A long-polling pull must not miss a message that lands between its read and its hold."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

from pymq.client import broker_api
from pymq.client.producer import Producer
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.message import Message, iter_messages
from pymq.protocol.route import MessageQueue
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


class _Channel:
    remote_addr = "127.0.0.1:1"
    attrs: dict[str, Any] = {}


async def test_message_arriving_before_the_hold_answers_the_pull(tmp_path: Path) -> None:
    """The hold starts a loop step after the empty read; a send in between answers the pull at once.

    (Consumers that pull ahead send their next pull as the producer sends: before the fix the
    pull waited for its whole suspend time.)
    """
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster:
        await cluster.create_topic("race", 1)
        handler = cluster.brokers[0].dispatcher._handlers[RequestCode.PULL_MESSAGE]
        cmd = broker_api.pull_message("g", MessageQueue("race", "", 0), 0, max_nums=32, suspend_ms=20_000)
        held = handler(cmd, _Channel())  # nothing stored yet: the handler answers later
        assert inspect.isawaitable(held)
        async with Producer(cluster.namesrv_addr) as p:
            await p.send(Message("race", b"arrived"))  # stored and announced before the hold exists
        resp = await asyncio.wait_for(held, 5.0)
        assert resp.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_messages(bytes(b"".join(resp.body)))] == [b"arrived"]
