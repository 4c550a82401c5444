"""pymq.remoting.produce_map: producer requests of RocketMQ 4.9 mapped to pymq records and back (pure)."""

from __future__ import annotations

import socket
import struct

import pytest

from pymq.protocol.record import encode_properties, encode_record, pack_host, parse_record
from pymq.remoting.codes import RequestCode, ResponseCode
from pymq.remoting.message_layout import decode_messages
from pymq.remoting.produce_map import (
    BatchRefused,
    check_transaction_body,
    decode_batch,
    is_batch,
    map_code,
    parse_send,
    records_of_send,
    send_response_ext,
    store_host_bytes,
)
from pymq.remoting.send_header import HeaderFieldError


def java_encode_message(body: bytes, properties: str, flag: int = 0) -> bytes:
    """MessageDecoder.encodeMessage of RocketMQ 4.9, transcribed: magic and CRC are written as 0."""
    p = properties.encode()
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(p)
    return struct.pack(">iiiii", size, 0, 0, flag, len(body)) + body + struct.pack(">h", len(p)) + p


def header_ext(**over: str) -> dict[str, str]:
    ext = {
        "producerGroup": "pg",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1700000000001",
        "flag": "5",
        "properties": "TAGS\x01a\x02UNIQ_KEY\x01U\x02",
        "reconsumeTimes": "2",
    }
    ext.update(over)
    return ext


BORN = pack_host("10.1.2.3", 4567)


def test_decode_batch_reads_encode_messages_layout() -> None:
    body = (
        java_encode_message(b"one", "KEYS\x01k1\x02UNIQ_KEY\x01A\x02", flag=3)
        + java_encode_message(b"", "")
        + java_encode_message("ü".encode(), "x\x01é\x02")
    )
    entries = decode_batch(body)
    assert [(e.flag, e.body, e.properties) for e in entries] == [
        (3, b"one", {"KEYS": "k1", "UNIQ_KEY": "A"}),
        (0, b"", {}),
        (0, "ü".encode(), {"x": "é"}),
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        java_encode_message(b"a", "p\x01v\x02")[:-1],  # properties cut short
        java_encode_message(b"a", "")[:12],  # head cut short
        struct.pack(">i", 7) + java_encode_message(b"a", "")[4:],  # totalSize disagrees with the fields
        java_encode_message(b"a", "")[:16] + struct.pack(">i", 1 << 20) + b"a\x00\x00",  # body length overruns
        java_encode_message(b"a", "") + b"\x00\x00",  # trailing bytes
    ],
)
def test_a_malformed_batch_names_the_body(body: bytes) -> None:
    with pytest.raises(HeaderFieldError) as e:
        decode_batch(body)
    assert e.value.field == "body"


def test_a_single_send_becomes_one_pymq_record_with_every_header_field() -> None:
    h = parse_send(RequestCode.SEND_MESSAGE, header_ext())
    rec = records_of_send(h, b"payload", BORN, batch=False)
    r = parse_record(rec, check_crc=True)
    assert r.total_size == len(rec)
    assert (r.topic, bytes(r.body), r.flag, r.sys_flag, r.born_timestamp) == (b"T", b"payload", 5, 0, 1700000000001)
    assert (r.born_host, r.reconsume_times) == (BORN, 2)
    assert bytes(r.properties) == b"TAGS\x01a\x02UNIQ_KEY\x01U\x02"


def test_a_retry_sends_max_reconsume_times_header_becomes_the_property_the_retry_policy_reads() -> None:
    h = parse_send(RequestCode.SEND_MESSAGE, header_ext(topic="%RETRY%cg", maxReconsumeTimes="4"))
    r = parse_record(records_of_send(h, b"p", BORN, batch=False))
    assert bytes(r.properties) == b"TAGS\x01a\x02UNIQ_KEY\x01U\x02MAX_RECONSUME_TIMES\x014\x02"
    plain = parse_send(RequestCode.SEND_MESSAGE, header_ext(maxReconsumeTimes="4"))  # not a retry topic: as sent
    assert b"MAX_RECONSUME" not in bytes(parse_record(records_of_send(plain, b"p", BORN, batch=False)).properties)


@pytest.mark.parametrize(
    ("raw", "stored_as_sent"),
    [
        ("TAGS\x01a\x02UNIQ_KEY\x01U\x02", True),
        ("", True),
        ("e\x01\x02", True),  # an empty value
        ("a\x01x\x02a\x01y\x02", False),  # a name twice: the last one, once
        ("\x01v\x02k\x01w\x02", False),  # an empty name is dropped
        ("k\x01w\x02tail", False),  # an unterminated entry is dropped
        ("k\x01w", False),
    ],
)
def test_properties_are_stored_as_sent_when_well_formed_else_as_parsed(raw: str, stored_as_sent: bool) -> None:
    h = parse_send(RequestCode.SEND_MESSAGE, header_ext(properties=raw))
    fast = parse_record(records_of_send(h, b"p", BORN, batch=False, raw_properties=raw))
    slow = parse_record(records_of_send(h, b"p", BORN, batch=False))
    assert bytes(slow.properties) == encode_properties(h.properties)
    assert bytes(fast.properties) == (raw.encode() if stored_as_sent else bytes(slow.properties))


def test_a_separator_inside_a_value_names_the_properties() -> None:
    raw = "k\x01a\x01b\x02"
    h = parse_send(RequestCode.SEND_MESSAGE, header_ext(properties=raw))
    with pytest.raises(HeaderFieldError) as e:
        records_of_send(h, b"p", BORN, batch=False, raw_properties=raw)
    assert e.value.field == "properties"


def test_v2_short_names_give_the_same_record() -> None:
    v2 = dict(zip("abcdefghij", header_ext().values(), strict=True))  # SEND_MESSAGE_V2 names a..j, in order
    one = records_of_send(parse_send(RequestCode.SEND_MESSAGE, header_ext()), b"p", BORN, batch=False)
    two = records_of_send(parse_send(RequestCode.SEND_MESSAGE_V2, v2), b"p", BORN, batch=False)
    assert one == two


@pytest.mark.parametrize(
    ("code", "ext", "field"),
    [
        (RequestCode.SEND_MESSAGE, {k: v for k, v in header_ext().items() if k != "topic"}, "topic"),
        (RequestCode.SEND_MESSAGE, header_ext(queueId="one"), "queueId"),
        (RequestCode.SEND_MESSAGE, header_ext(bornTimestamp="9" * 30), "bornTimestamp"),
        (RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "T"}, "defaultTopic"),
    ],
)
def test_a_bad_send_header_names_its_field(code: int, ext: dict[str, str], field: str) -> None:
    with pytest.raises(HeaderFieldError) as e:
        parse_send(code, ext)
    assert e.value.field == field and field in e.value.remark


def test_properties_too_long_for_a_record_name_the_field() -> None:
    h = parse_send(RequestCode.SEND_MESSAGE, header_ext(properties="big\x01" + "v" * 40000 + "\x02"))
    with pytest.raises(HeaderFieldError) as e:
        records_of_send(h, b"p", BORN, batch=False)
    assert e.value.field == "properties"


@pytest.mark.parametrize(
    ("code", "ext", "batch"),
    [
        (RequestCode.SEND_BATCH_MESSAGE, {}, True),
        (RequestCode.SEND_MESSAGE, {"batch": "true"}, True),
        (RequestCode.SEND_MESSAGE, {"batch": "false"}, False),
        (RequestCode.SEND_MESSAGE_V2, {"m": "1"}, True),  # the C++ client's bool
        (RequestCode.SEND_MESSAGE_V2, {"m": "0"}, False),
        (RequestCode.SEND_MESSAGE_V2, {"m": "TRUE"}, True),
        (RequestCode.SEND_MESSAGE_V2, {}, False),
    ],
)
def test_is_batch(code: int, ext: dict[str, str], batch: bool) -> None:
    full = dict(header_ext())
    if code == RequestCode.SEND_MESSAGE_V2:
        full = dict(zip("abcdefghij", full.values(), strict=True))
    full.update(ext)
    assert is_batch(code, full, parse_send(code, full)) is batch


def test_a_batch_becomes_one_record_per_message_with_the_header_properties_added() -> None:
    h = parse_send(RequestCode.SEND_BATCH_MESSAGE, header_ext(properties="WAIT\x01true\x02"))
    body = java_encode_message(b"m0", "UNIQ_KEY\x01A\x02", flag=1) + java_encode_message(b"m1", "UNIQ_KEY\x01B\x02")
    data = records_of_send(h, body, BORN, batch=True)
    first = parse_record(data, check_crc=True)
    second = parse_record(data, first.total_size, check_crc=True)
    assert first.total_size + second.total_size == len(data)
    assert [(bytes(r.body), r.flag, bytes(r.properties)) for r in (first, second)] == [
        (b"m0", 1, encode_properties({"UNIQ_KEY": "A", "WAIT": "true"})),
        (b"m1", 0, encode_properties({"UNIQ_KEY": "B", "WAIT": "true"})),
    ]
    assert {r.born_timestamp for r in (first, second)} == {1700000000001}


@pytest.mark.parametrize(
    "over",
    [{"topic": "%RETRY%g"}, {"sysFlag": "4"}, {"properties": "TRAN_MSG\x01true\x02"}, {"properties": "DELAY\x013\x02"}],
)
def test_batches_refused_as_rocketmq_refuses_them(over: dict[str, str]) -> None:
    h = parse_send(RequestCode.SEND_BATCH_MESSAGE, header_ext(**over))
    with pytest.raises(BatchRefused):
        records_of_send(h, java_encode_message(b"x", ""), BORN, batch=True)


def test_send_response_ext_is_the_offset_msg_id_of_each_stored_message() -> None:
    store = store_host_bytes("192.168.7.9:10911")
    assert store == socket.inet_aton("192.168.7.9") + struct.pack(">i", 10911)

    def expect(offset: int) -> str:
        return (socket.inet_aton("192.168.7.9") + struct.pack(">iq", 10911, offset)).hex().upper()

    ext = send_response_ext({"queueId": 3, "queueOffset": 17, "commitLogOffsets": [4096]}, store, None)
    assert ext == {
        "msgId": expect(4096), "queueId": "3", "queueOffset": "17", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true",
    }  # fmt: skip
    batch = send_response_ext({"queueId": 0, "queueOffset": 5, "commitLogOffsets": [1, 200, 300]}, store, "TX")
    assert batch["msgId"] == f"{expect(1)},{expect(200)},{expect(300)}" and batch["transactionId"] == "TX"
    partial = {"queueId": 0, "queueOffset": 5, "commitLogOffsets": [1, 2], "statuses": [0, 3]}
    assert send_response_ext(partial, store, None)["msgId"] == expect(1)


@pytest.mark.parametrize(
    ("native", "mapped"),
    [(0, 0), (1, 1), (2, 2), (10, 10), (11, 11), (12, 12), (13, 13), (14, 14), (16, 16), (17, 17), (22, 22), (213, 1)],
)
def test_response_codes(native: int, mapped: int) -> None:
    code, remark = map_code(native, "missing header field 'topic'")
    assert code == mapped and remark == "missing header field 'topic'"
    assert map_code(40013, None) == (int(ResponseCode.SYSTEM_ERROR), "pymq response code 40013")


def test_check_transaction_body_is_the_half_message_on_its_real_topic_and_queue() -> None:
    props = encode_properties({"REAL_TOPIC": "orders", "REAL_QID": "3", "UNIQ_KEY": "U9", "PGROUP": "pg"})
    stored = encode_record(
        b"RMQ_SYS_TRANS_HALF_TOPIC",
        b"half body",
        props,
        flag=9,
        born_timestamp=11,
        born_host=BORN,
        queue_id=0,
        queue_offset=42,
        physical_offset=123456,
        store_timestamp=22,
        store_host=pack_host("127.0.0.1", 10911),
    )
    [m] = decode_messages(check_transaction_body(stored))
    assert (m.topic, m.queue_id, m.body, m.flag, m.queue_offset, m.commit_log_offset) == (
        "orders", 3, b"half body", 9, 42, 123456,
    )  # fmt: skip
    assert (m.born_host, m.store_host, m.born_timestamp, m.store_timestamp) == (
        ("10.1.2.3", 4567), ("127.0.0.1", 10911), 11, 22,
    )  # fmt: skip
    assert m.properties["UNIQ_KEY"] == "U9" and m.properties["PGROUP"] == "pg"
