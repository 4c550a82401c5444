"""SEND_MESSAGE / SEND_MESSAGE_V2 headers as RocketMQ 4.x clients fill them."""

from __future__ import annotations

import pytest

from pymq.remoting.codes import RequestCode, ResponseCode
from pymq.remoting.command import RemotingCommand
from pymq.remoting.send_header import HeaderFieldError, SendMessageRequestHeader, decode_send_header

#: extFields of the C++ client's SEND_MESSAGE (rocketmq-client-python 0.5.0rc2), as captured.
CPP_V1 = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "eqWLJeNNLn3pMe5ZhL58FS0xqwQ=",
    "batch": "0",
    "bornTimestamp": "1795857381253",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "flag": "0",
    "producerGroup": "PG_R30",
    "properties": "KEYS\x01k1\x02TAGS\x01TagA\x02UNIQ_KEY\x010100007F000057C60000055A66920100\x02WAIT\x01true\x02",
    "queueId": "0",
    "reconsumeTimes": "0",
    "sysFlag": "0",
    "topic": "TopicR30",
    "unitMode": "0",
}

EXPECTED = SendMessageRequestHeader(
    producer_group="PG_R30",
    topic="TopicR30",
    default_topic="TBW102",
    default_topic_queue_nums=4,
    queue_id=0,
    sys_flag=0,
    born_timestamp=1795857381253,
    flag=0,
    properties={"KEYS": "k1", "TAGS": "TagA", "UNIQ_KEY": "0100007F000057C60000055A66920100", "WAIT": "true"},
)


def test_cpp_client_send_message_header() -> None:
    assert decode_send_header(RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=CPP_V1)) == EXPECTED


def test_v2_short_names_give_the_same_header() -> None:
    long_to_short = {
        "producerGroup": "a",
        "topic": "b",
        "defaultTopic": "c",
        "defaultTopicQueueNums": "d",
        "queueId": "e",
        "sysFlag": "f",
        "bornTimestamp": "g",
        "flag": "h",
        "properties": "i",
        "reconsumeTimes": "j",
        "unitMode": "k",
        "batch": "m",
    }
    v2 = {long_to_short.get(k, k): v for k, v in CPP_V1.items()}
    v2["l"] = "16"
    v2["m"] = "true"
    got = decode_send_header(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=v2))
    assert got.max_reconsume_times == 16 and got.batch is True
    got.max_reconsume_times, got.batch = None, False
    assert got == EXPECTED


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"producerGroup": None}, "producerGroup"),
        ({"topic": None}, "topic"),
        ({"queueId": "one"}, "queueId"),
        ({"queueId": " 1"}, "queueId"),
        ({"queueId": "1_0"}, "queueId"),
        ({"queueId": "2147483648"}, "queueId"),
        ({"bornTimestamp": ""}, "bornTimestamp"),
        ({"sysFlag": None}, "sysFlag"),
        ({"reconsumeTimes": "x"}, "reconsumeTimes"),
    ],
)
def test_missing_or_ill_typed_fields_are_named(change: dict[str, str | None], field: str) -> None:
    ext = {k: v for k, v in {**CPP_V1, **change}.items() if v is not None}
    with pytest.raises(HeaderFieldError) as err:
        decode_send_header(RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=ext))
    assert err.value.field == field
    assert field in err.value.remark
    assert err.value.code == ResponseCode.INVALID_PARAMETER
