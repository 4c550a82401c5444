"""MessageDecoder layout: records built by hand from RocketMQ 4.9's MessageDecoder.encode."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest

from pymq.errors import RemoteProtocolError
from pymq.remoting.message_layout import (
    MessageExt,
    decode_messages,
    encode_message,
    offset_msg_id,
    parse_properties,
    properties_string,
)


def reference_record(m: MessageExt) -> bytes:
    """Field by field in the order of MessageDecoder.encode (IPv4 hosts)."""
    topic = m.topic.encode()
    props = "".join(f"{k}\x01{v}\x02" for k, v in m.properties.items()).encode()
    size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + len(m.body) + 1 + len(topic) + 2 + len(props)
    out = struct.pack(">i", size)
    out += struct.pack(">i", -626843481)
    out += struct.pack(">i", zlib.crc32(m.body) & 0x7FFFFFFF)
    out += struct.pack(">iiqqiq", m.queue_id, m.flag, m.queue_offset, m.commit_log_offset, m.sys_flag, m.born_timestamp)
    out += socket.inet_aton(m.born_host[0]) + struct.pack(">i", m.born_host[1])
    out += struct.pack(">q", m.store_timestamp)
    out += socket.inet_aton(m.store_host[0]) + struct.pack(">i", m.store_host[1])
    out += struct.pack(">iq", m.reconsume_times, m.prepared_transaction_offset)
    out += struct.pack(">i", len(m.body)) + m.body
    out += struct.pack(">b", len(topic)) + topic
    out += struct.pack(">h", len(props)) + props
    return out


SAMPLE = MessageExt(
    topic="TopicTest",
    body=b"Hello RocketMQ \xe2\x9c\x93",
    queue_id=2,
    flag=0,
    queue_offset=17,
    commit_log_offset=123456789,
    sys_flag=0,
    born_timestamp=1_764_000_000_123,
    born_host=("10.1.2.3", 54321),
    store_timestamp=1_764_000_000_456,
    store_host=("192.168.0.1", 10911),
    reconsume_times=3,
    properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F0000010001", "DELAY": "3"},
)


def test_record_matches_the_reference_byte_for_byte() -> None:
    assert encode_message(SAMPLE) == reference_record(SAMPLE)


def test_records_decode_back() -> None:
    other = MessageExt(topic="%RETRY%G", body=b"", store_host=("127.0.0.1", 1))
    buf = encode_message(SAMPLE) + encode_message(other)
    assert decode_messages(buf) == [SAMPLE, other]


def test_offset_msg_id_is_host_port_offset_in_upper_hex() -> None:
    assert offset_msg_id(("192.168.0.1", 10911), 0) == "C0A8000100002A9F0000000000000000"
    assert offset_msg_id(("127.0.0.1", 10911), 0x1234) == "7F00000100002A9F0000000000001234"


def test_properties_round_trip_and_skip_junk() -> None:
    props = {"TAGS": "a", "KEYS": "x y"}
    text = properties_string(props)
    assert text == "TAGS\x01a\x02KEYS\x01x y\x02"
    assert parse_properties(text) == props
    assert parse_properties("junk\x02TAGS\x01b\x02") == {"TAGS": "b"}
    assert parse_properties(None) == {}


def test_truncated_record_is_a_clear_error() -> None:
    buf = encode_message(SAMPLE)
    with pytest.raises(RemoteProtocolError, match="record at 0"):
        decode_messages(buf[:-3])
    with pytest.raises(RemoteProtocolError, match="record at 0"):
        decode_messages(b"\x00\x00\x00\x10" + buf[4:])


def test_stored_records_become_message_decoder_records_field_for_field(record_impl: str) -> None:
    from pymq.protocol.record import encode_properties, encode_record, pack_host
    from pymq.remoting.message_layout import from_stored_records

    props = {"TAGS": "tagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    stored = b"".join(
        encode_record(
            f"T{i}".encode(),
            b"body-%d" % i * (i + 1),
            encode_properties(props),
            flag=7,
            sys_flag=2,
            born_timestamp=1_700_000_000_000 + i,
            born_host=pack_host("10.1.2.3", 5000 + i),
            reconsume_times=i,
            prepared_tx_offset=0,
            queue_id=i % 4,
            queue_offset=100 + i,
            physical_offset=4096 * i,
            store_timestamp=1_700_000_000_500 + i,
            store_host=pack_host("127.0.0.1", 10911),
        )
        for i in range(3)
    )
    converted = from_stored_records(stored)
    msgs = decode_messages(converted)
    assert converted == b"".join(map(encode_message, msgs))  # byte for byte what MessageDecoder would write
    assert [m.topic for m in msgs] == ["T0", "T1", "T2"]
    for i, m in enumerate(msgs):
        assert m.body == b"body-%d" % i * (i + 1)
        assert (m.queue_id, m.queue_offset, m.commit_log_offset) == (i % 4, 100 + i, 4096 * i)
        assert (m.flag, m.sys_flag, m.reconsume_times) == (7, 2, i)
        assert m.born_host == ("10.1.2.3", 5000 + i) and m.store_host == ("127.0.0.1", 10911)
        assert (m.born_timestamp, m.store_timestamp) == (1_700_000_000_000 + i, 1_700_000_000_500 + i)
        assert m.properties == props


def test_the_accelerator_and_the_python_twin_convert_alike_even_mutated_records() -> None:
    """stored_to_message_decoder (C) vs from_stored_records_py: the same bytes, or the C code declines
    (NotImplemented) and the Python body raises; over valid, truncated, mutated and long-topic inputs."""
    import random

    from pymq.errors import MessageDecodeError
    from pymq.protocol import accelerator
    from pymq.protocol.record import blank_marker, encode_properties, encode_record
    from pymq.remoting.message_layout import from_stored_records_py

    accel = accelerator._speedups
    if accel is None:
        import os

        if os.environ.get("CI") == "true":
            pytest.fail("CI builds the accelerator: pymq._speedups must import")
        pytest.skip("the accelerator is not built here (under CI=true this fails)")
    rng = random.Random(3)
    good = b"".join(
        encode_record(b"T" * rng.randrange(1, 130), rng.randbytes(rng.randrange(0, 300)),
                      encode_properties({"TAGS": "x" * rng.randrange(0, 9)}), queue_offset=i)
        for i in range(6)
    )  # fmt: skip
    inputs = [good, good + blank_marker(64), good[: len(good) // 2], b"", b"\x00" * 7]
    for _ in range(400):
        b = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        inputs.append(bytes(b[: rng.randrange(1, len(b) + 1)]))
    agreed = declined = 0
    for data in inputs:
        try:
            want: bytes | type[BaseException] = from_stored_records_py(data)
        except (MessageDecodeError, ValueError) as exc:
            want = type(exc)
        got = accel.stored_to_message_decoder(data)
        if got is NotImplemented:
            assert not isinstance(want, bytes), "C declined what Python converts"
            declined += 1
        else:
            assert got == want
            agreed += 1
    assert agreed > 5 and declined > 50
