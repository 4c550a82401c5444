"""PULL_MESSAGE's optional maxMsgBytes: the broker's answer stops at the byte budget (at least one record)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.client import broker_api
from pymq.client.consumer_types import PullStatus
from pymq.client.instance import ClientInstance
from pymq.client.producer import Producer
from pymq.client.pull_api import pull
from pymq.protocol.filter import Subscription
from pymq.protocol.message import Message, iter_messages
from pymq.protocol.route import MessageQueue
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


async def test_pull_answer_is_cut_at_max_msg_bytes(tmp_path: Path) -> None:
    """A budget of 2.5 records returns 2; one smaller than a record still returns 1; none: maxMsgNums rules."""
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster:
        await cluster.create_topic("bytes", 1)
        async with Producer(cluster.namesrv_addr) as p:
            for i in range(10):
                await p.send(Message("bytes", bytes([i]) * 1000))
        inst = ClientInstance.acquire(cluster.namesrv_addr)
        await inst.start()
        try:
            await inst.update_route("bytes")
            mq = (await inst.routes.read_queues("bytes"))[0]
            sub = Subscription.parse("bytes", "*")
            record = (await pull(inst, mq, "g", 0, sub, max_nums=1)).messages[0].store_size
            got = {}
            for budget in (record * 5 // 2, 10, None):
                r = await pull(inst, mq, "g", 0, sub, max_nums=8, max_bytes=budget)
                assert r.status is PullStatus.FOUND
                got[budget] = ([m.body[0] for m in r.messages], r.next_begin_offset)
            assert got == {record * 5 // 2: ([0, 1], 2), 10: ([0], 1), None: (list(range(8)), 8)}
            # An old client's request (no maxMsgBytes): the broker's default budget applies.
            addr = inst.broker_addr(mq.brokerName)
            assert addr is not None
            cmd = broker_api.pull_message("g", MessageQueue("bytes", mq.brokerName, 0), 0, max_nums=32)
            assert "maxMsgBytes" not in cmd.ext
            resp = await inst.rpc.invoke(addr, cmd, 5.0)
            assert len(list(iter_messages(bytes(resp.body)))) == 10
        finally:
            await inst.release()
