"""A slave broker answers writes through its read-only role interceptor, with the answers handlers used to give."""

from __future__ import annotations

from pathlib import Path

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import FLAG_COMMIT_OFFSET, PullMessageRequest, UpdateConsumerOffsetRequest
from pymq.protocol.route import MessageQueue, TopicConfig
from pymq.testing import LocalCluster
from pymq.transport.client import RpcClient

LOCK_BODY = {"consumerGroup": "g", "clientId": "c", "mqSet": [MessageQueue("t", "broker-a", 0).to_dict()]}


async def test_slave_refuses_writes_and_serves_reads_only_when_enabled(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster:
        await cluster.create_topic("t", 1)
        slave = await cluster.add_broker(0, broker_id=1, role="SLAVE", store={"store_dir": str(tmp_path / "slave")})
        slave.topics.upsert(TopicConfig("t", 1, 1))
        master = cluster.brokers[0].address
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
            assert (await call(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext(), addr=master)).code == 0
            assert cluster.brokers[0].offsets.query("g", "t", 0) == 5

            assert slave.pop_state is None  # no revive log, no revive service on a slave
            unlock = await call(RequestCode.UNLOCK_BATCH_MQ, None, encode_body(LOCK_BODY))
            assert unlock.code == ResponseCode.SUCCESS  # unlocking is harmless anywhere

            pull = PullMessageRequest(
                consumer_group="g", topic="t", queue_id=0, queue_offset=3, sys_flag=FLAG_COMMIT_OFFSET, commit_offset=2
            )
            resp = await call(RequestCode.PULL_MESSAGE, pull.to_ext())
            assert (resp.code, resp.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "slave does not serve reads")
            assert resp.ext["nextBeginOffset"] == 3
            slave.update_runtime_config({"slave_read_enable": True})
            resp = await call(RequestCode.PULL_MESSAGE, pull.to_ext())
            assert resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED)
            assert slave.offsets.query("g", "t", 0) < 0  # a slave never commits with a pull

            heartbeat = {
                "clientID": "c1",
                "consumerDataSet": [{"groupName": "g2", "messageModel": "CLUSTERING", "subscriptionDataSet": []}],
            }
            assert (await call(RequestCode.HEART_BEAT, None, encode_body(heartbeat))).code == 0
            assert slave.topics.get("%RETRY%g2") is None  # a slave creates no topics
            assert (await call(RequestCode.HEART_BEAT, None, encode_body(heartbeat), addr=master)).code == 0
            assert cluster.brokers[0].topics.get("%RETRY%g2") is not None
