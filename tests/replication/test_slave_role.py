"""A slave broker: writes answered by its read-only role interceptor; reads served, offsets never taken.

RocketMQ's slave serves pulls (4.x sets PULL_RETRY_IMMEDIATELY without ``slaveReadEnable``
and then overwrites it with the read's own code): consumers read from it while the master is
away. ``slave_read_enable`` decides only where the broker *suggests* the next pull goes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.message import iter_messages
from pymq.protocol.requests import FLAG_COMMIT_OFFSET, PullMessageRequest, UpdateConsumerOffsetRequest
from pymq.protocol.route import MessageQueue
from pymq.testing import LocalCluster
from pymq.transport.client import RpcClient
from tests.master_slave import master_and_slave

pytestmark = pytest.mark.integration

LOCK_BODY = {"consumerGroup": "g", "clientId": "c", "mqSet": [MessageQueue("t", "broker-a", 0).to_dict()]}


async def test_slave_refuses_writes_serves_reads_and_never_commits(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("t", 1)
        async with Producer(cluster.namesrv_addr, "p") as producer:
            for i in range(5):
                await producer.send(Message("t", f"m{i}".encode()))
        master, slave = await master_and_slave(cluster, cluster.brokers[0])
        async with RpcClient() as rpc:

            async def call(code: int, ext: dict | None = None, body: bytes = b"", addr: str = slave.address) -> Command:
                return await rpc.invoke(addr, Command.request(code, ext, body), 5.0)

            refused = {
                RequestCode.SEND_MESSAGE: "broker is a slave and cannot accept messages",
                RequestCode.SEND_BATCH_MESSAGE: "broker is a slave and cannot accept messages",
                RequestCode.CONSUMER_SEND_MSG_BACK: "send back goes to the master",
                RequestCode.LOCK_BATCH_MQ: "queue locks live on the master",
                RequestCode.POP_MESSAGE: "pop consumption is served by the master",
                RequestCode.ACK_MESSAGE: "pop consumption is served by the master",
                RequestCode.BATCH_ACK_MESSAGE: "pop consumption is served by the master",
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME: "pop consumption is served by the master",
            }
            for code, remark in refused.items():
                # Refused before the request is even parsed (an empty header would be invalid).
                resp = await call(code, {}, encode_body(LOCK_BODY))
                assert (resp.code, resp.remark) == (ResponseCode.SERVICE_NOT_AVAILABLE, remark), code

            commit = UpdateConsumerOffsetRequest(consumer_group="g", topic="t", queue_id=0, commit_offset=5)
            assert (await call(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext())).code == ResponseCode.SUCCESS
            assert slave.offsets.query("g", "t", 0) < 0  # accepted and dropped: offsets are the master's
            assert (await call(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext(), addr=master.address)).code == 0
            assert master.offsets.query("g", "t", 0) == 5

            assert slave.pop_state is None  # no revive log, no revive service on a slave
            unlock = await call(RequestCode.UNLOCK_BATCH_MQ, None, encode_body(LOCK_BODY))
            assert unlock.code == ResponseCode.SUCCESS  # unlocking is harmless anywhere

            # Reads are served whether or not slave_read_enable is on; a pull's commit is ignored.
            pull = PullMessageRequest(
                consumer_group="g", topic="t", queue_id=0, queue_offset=1, sys_flag=FLAG_COMMIT_OFFSET, commit_offset=3
            )
            for enabled in (False, True):
                slave.update_runtime_config({"slave_read_enable": enabled})
                resp = await call(RequestCode.PULL_MESSAGE, pull.to_ext())
                assert resp.code == ResponseCode.SUCCESS, (enabled, resp.remark)
                assert [m.body for m in iter_messages(resp.body)] == [b"m1", b"m2", b"m3", b"m4"]
                assert (resp.ext["nextBeginOffset"], resp.ext["maxOffset"]) == (5, 5)
                assert resp.ext["suggestWhichBrokerId"] == 0  # caught up: the master
                assert slave.offsets.query("g", "t", 0) < 0  # a slave never commits with a pull

            heartbeat = {
                "clientID": "c1",
                "consumerDataSet": [{"groupName": "g2", "messageModel": "CLUSTERING", "subscriptionDataSet": []}],
            }
            assert (await call(RequestCode.HEART_BEAT, None, encode_body(heartbeat))).code == 0
            assert slave.topics.get("%RETRY%g2") is None  # a slave creates no topics
            assert (await call(RequestCode.HEART_BEAT, None, encode_body(heartbeat), addr=master.address)).code == 0
            assert master.topics.get("%RETRY%g2") is not None


async def test_pulls_suggest_the_slave_when_far_behind_and_the_master_when_caught_up(tmp_path: Path) -> None:
    """RocketMQ's suggestWhichBrokerId: with slave_read_enable, a consumer whose unread commitlog
    bytes exceed the threshold is sent to the group's whichBrokerWhenConsumeSlowly (1), otherwise
    to its brokerId (0); without slave_read_enable always to the master."""
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("t", 1)
        async with Producer(cluster.namesrv_addr, "p") as producer:
            for _ in range(20):
                await producer.send(Message("t", b"x" * 1000))
        master, slave = await master_and_slave(cluster, cluster.brokers[0])
        async with RpcClient() as rpc:

            async def suggestion(addr: str, offset: int) -> int:
                pull = PullMessageRequest(
                    consumer_group="g", topic="t", queue_id=0, queue_offset=offset, max_msg_nums=2
                )
                resp = await rpc.invoke(addr, Command.request(RequestCode.PULL_MESSAGE, pull.to_ext()), 5.0)
                assert resp.code == ResponseCode.SUCCESS
                return int(resp.ext["suggestWhichBrokerId"])

            # Off (the default): always the master, however far behind.
            assert [await suggestion(b.address, 0) for b in (master, slave)] == [0, 0]
            # Default threshold: 40 % of physical memory; 20 KB behind is nothing.
            for b in (master, slave):
                b.update_runtime_config({"slave_read_enable": True})
            assert [await suggestion(b.address, 0) for b in (master, slave)] == [0, 0]
            # A threshold of 5 KB: reading from the start leaves ~18 KB unread -> the slave (1),
            # from both; reading the last two leaves nothing -> the master (0), from both.
            for b in (master, slave):
                b.update_runtime_config({"slave_read_lag_bytes": 5000})
            assert [await suggestion(b.address, 0) for b in (master, slave)] == [1, 1]
            assert [await suggestion(b.address, 18) for b in (master, slave)] == [0, 0]
            # The group's settings decide the ids (RocketMQ's subscription group config).
            master.subscription_groups.get("g").whichBrokerWhenConsumeSlowly = 2  # type: ignore[union-attr]
            assert await suggestion(master.address, 0) == 2
