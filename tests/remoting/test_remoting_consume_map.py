"""pymq.remoting.consume_map: a 4.x consumer's headers and bodies <-> pymq's native ones (pure)."""

from __future__ import annotations

import json

import pytest

from pymq.protocol.record import encode_properties, encode_record, pack_host
from pymq.protocol.requests import PullMessageRequest
from pymq.remoting.consume_map import (
    RemotingRequestError,
    consumer_data_names,
    lock_request_body,
    lock_response_body,
    native_code,
    offset_request,
    pull_body,
    pull_request,
    pull_response_ext,
)
from pymq.remoting.message_layout import decode_messages, encode_message, from_stored_records


def reference_pull_header(**over: str) -> dict[str, str]:
    """PullMessageRequestHeader's extFields as a 4.9 push consumer sends them (all strings)."""
    ext = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "3",
        "queueOffset": "17",
        "maxMsgNums": "32",
        "sysFlag": "3",  # commit offset | suspend, no subscription
        "commitOffset": "15",
        "suspendTimeoutMillis": "15000",
        "subVersion": "1700000000000",
    }
    ext.update(over)
    return ext


def test_pull_header_without_subscription_bit_asks_for_the_registered_one() -> None:
    req = pull_request(reference_pull_header(subscription="ignored", AccessKey="", Signature="x", OnsChannel="ALIYUN"))
    assert "Signature" not in req.ext and "subscription" not in req.ext
    assert req.needs_subscription and (req.consumer_group, req.topic) == ("G", "T")
    native = PullMessageRequest.from_ext(req.ext)
    assert (native.queue_id, native.queue_offset, native.max_msg_nums) == (3, 17, 32)
    assert (native.sys_flag, native.commit_offset, native.suspend_timeout_millis) == (3, 15, 15000)
    assert native.subscription is None and native.sub_version == 1700000000000


def test_pull_header_with_subscription_bit_carries_its_expression() -> None:
    req = pull_request(reference_pull_header(sysFlag="6", subscription="TagA || TagB", expressionType="TAG"))
    assert not req.needs_subscription
    native = PullMessageRequest.from_ext(req.ext)
    assert native.subscription == "TagA || TagB" and native.sys_flag == 2  # the bit is RocketMQ's, not pymq's


@pytest.mark.parametrize(("asked", "clamped"), [("0", 1), ("-5", 1), ("32", 32), ("5000", 1024)])
def test_max_msg_nums_is_clamped_to_pymqs_range(asked: str, clamped: int) -> None:
    assert (
        PullMessageRequest.from_ext(pull_request(reference_pull_header(maxMsgNums=asked)).ext).max_msg_nums == clamped
    )


@pytest.mark.parametrize(
    ("over", "named"),
    [
        ({"topic": None}, "topic"),
        ({"consumerGroup": None}, "consumerGroup"),
        ({"queueOffset": "1.5"}, "queueOffset"),
        ({"queueId": "٣"}, "queueId"),  # a digit, but not one Java's parseInt reads
        ({"commitOffset": "0x10"}, "commitOffset"),
        ({"maxMsgNums": "lots"}, "maxMsgNums"),
        ({"sysFlag": "x"}, "sysFlag"),
        ({"sysFlag": "4"}, "subscription"),
        ({"sysFlag": "8", "subscription": "*"}, "class filter"),
        ({"expressionType": "SQL92"}, "SQL92"),
    ],
)
def test_bad_pull_header_names_the_field(over: dict[str, str | None], named: str) -> None:
    """What pull_request checks itself (queueId, queueOffset …: the native handler names them, see
    test_remoting_consume's bad-input cases)."""
    ext = {k: v for k, v in {**reference_pull_header(), **over}.items() if v is not None}
    with pytest.raises(RemotingRequestError) as err:
        pull_request(ext)
    assert named in err.value.remark and err.value.code == 1  # SYSTEM_ERROR, as a 4.9 broker answers


def test_pull_response_ext_is_the_four_fields() -> None:
    native = {"nextBeginOffset": 9, "minOffset": 1, "maxOffset": 12, "suggestWhichBrokerId": 1, "extra": "x"}
    assert pull_response_ext(native) == {
        "suggestWhichBrokerId": 1,
        "nextBeginOffset": 9,
        "minOffset": 1,
        "maxOffset": 12,
    }


def _stored(n: int) -> list[bytes]:
    props = encode_properties({"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "U", "color": "blue"})
    host = pack_host("127.0.0.1", 10911)
    return [
        encode_record(
            b"T",
            bytes(range(i, i + 40)),
            props,
            queue_id=1,
            queue_offset=i,
            physical_offset=1000 * i,
            born_host=host,
            store_host=host,
            reconsume_times=i,
            born_timestamp=5,
            store_timestamp=6,
        )
        for i in range(n)
    ]


def test_pull_body_of_one_buffer_or_many_is_message_decoder_records() -> None:
    records = _stored(3)
    whole = pull_body(b"".join(records))
    runs = pull_body([memoryview(r) for r in records])
    assert isinstance(runs, list) and len(runs) == 3  # one converted buffer per run, not joined
    assert whole == b"".join(runs) == pull_body([b"".join(records)])
    assert isinstance(whole, bytes)
    msgs = decode_messages(whole)
    assert whole == b"".join(map(encode_message, msgs))
    assert [m.reconsume_times for m in msgs] == [0, 1, 2]
    assert [m.body for m in msgs] == [bytes(range(i, i + 40)) for i in range(3)]
    assert msgs[2].properties == {"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "U", "color": "blue"}
    assert whole == from_stored_records(b"".join(records))


@pytest.mark.parametrize(
    ("code", "ext"),
    [
        ("QUERY_CONSUMER_OFFSET", {"consumerGroup": "G", "topic": "T", "queueId": "2"}),
        ("UPDATE_CONSUMER_OFFSET", {"consumerGroup": "G", "topic": "T", "queueId": "2", "commitOffset": "7"}),
        ("GET_MAX_OFFSET", {"topic": "T", "queueId": "2"}),
        ("GET_MIN_OFFSET", {"topic": "T", "queueId": "2"}),
        ("GET_EARLIEST_MSG_STORETIME", {"topic": "T", "queueId": "2"}),
        ("SEARCH_OFFSET_BY_TIMESTAMP", {"topic": "T", "queueId": "2", "timestamp": "1700000000000"}),
    ],
)
def test_offset_headers_keep_rocketmqs_names_as_numbers(code: str, ext: dict[str, str]) -> None:
    out = offset_request(code, ext)
    assert set(out) == set(ext)
    assert out["queueId"] == 2 and all(isinstance(out[k], int) for k in ext if k not in ("consumerGroup", "topic"))


def test_offset_header_missing_field_is_named() -> None:
    with pytest.raises(RemotingRequestError, match="commitOffset"):
        offset_request("UPDATE_CONSUMER_OFFSET", {"consumerGroup": "G", "topic": "T", "queueId": "2"})
    with pytest.raises(RemotingRequestError, match="queueId"):
        offset_request("GET_MAX_OFFSET", {"topic": "T", "queueId": "two"})


def test_lock_bodies_json_to_native_and_back() -> None:
    fastjson = b'{"clientId":"c@1","consumerGroup":"G","mqSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}'
    native = lock_request_body(fastjson)
    assert native == {
        "consumerGroup": "G",
        "clientId": "c@1",
        "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 1}],
    }
    answer = lock_response_body({"lockOKMQSet": [{"topic": "T", "brokerName": "b", "queueId": 1}]})
    assert answer == b'{"lockOKMQSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}'
    assert json.loads(lock_response_body({})) == {"lockOKMQSet": []}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"[1]", "not a JSON object"),
        (b"\xff", "not JSON"),
        (b'{"consumerGroup":"G","mqSet":[]}', "clientId"),
        (b'{"consumerGroup":"G","clientId":"c","mqSet":{}}', "mqSet"),
        (b'{"consumerGroup":"G","clientId":"c","mqSet":[{"topic":"T","brokerName":"b"}]}', "mqSet[0].queueId"),
        (b'{"consumerGroup":"G","clientId":"c","mqSet":[{"topic":"T","brokerName":"b","queueId":"x"}]}', "lock"),
    ],
)
def test_bad_lock_body_names_the_field(body: bytes, named: str) -> None:
    with pytest.raises(RemotingRequestError) as err:
        lock_request_body(body)
    assert named in err.value.remark


def test_consumer_data_enums_from_the_cpp_clients_ordinals() -> None:
    cpp = {"groupName": "G", "consumeType": 1, "messageModel": 0, "consumeFromWhere": 4}
    assert consumer_data_names(cpp) == {
        "groupName": "G",
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "BROADCASTING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
    }
    java = {
        "consumeType": "CONSUME_ACTIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_TIMESTAMP",
    }
    assert consumer_data_names(dict(java)) == java
    assert consumer_data_names({"messageModel": "1"})["messageModel"] == "CLUSTERING"
    with pytest.raises(RemotingRequestError, match="messageModel"):
        consumer_data_names({"messageModel": 7})


def test_native_only_codes_become_rocketmq_codes() -> None:
    assert native_code(213) == 1  # pymq's INVALID_PARAMETER -> SYSTEM_ERROR
    assert [native_code(c) for c in (0, 19, 20, 21, 22, 17, 26)] == [0, 19, 20, 21, 22, 17, 26]


async def test_consume_message_directly_reaches_a_4x_client_in_message_decoder_layout() -> None:
    """RemotingChannel.request: CONSUME_MESSAGE_DIRECTLY's stored record goes in MessageDecoder's layout (as
    RocketMQ's broker sends it), same code and header; other requests (running info) go as they are."""
    from pymq.broker.remoting.gateway import RemotingChannel
    from pymq.protocol.codes import RequestCode as NativeCode
    from pymq.protocol.command import Command

    sent: list[Command] = []

    class Conn:
        remote_addr = "127.0.0.1:1"
        attrs: dict = {}

        async def request(self, cmd: Command, timeout: float) -> Command:
            sent.append(cmd)
            return cmd.response(body=b"{}")

    channel = RemotingChannel(Conn(), lambda cmd: cmd)  # type: ignore[arg-type]
    record = _stored(1)[0]
    ext = {"consumerGroup": "g", "clientId": "c", "msgId": "M", "brokerName": "broker-a"}
    await channel.request(Command.request(NativeCode.CONSUME_MESSAGE_DIRECTLY, dict(ext), record), 1.0)
    await channel.request(Command.request(NativeCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g"}), 1.0)
    direct, running = sent
    assert direct.code == 309 and direct.ext == ext
    (msg,) = decode_messages(direct.body_bytes())
    assert msg.body == bytes(range(40)) and msg.properties["KEYS"] == "k" and msg.topic == "T"
    assert running.code == 307 and running.body_bytes() == b""
