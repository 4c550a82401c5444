"""MessageExt decodes lazily from the pull buffer: every public attribute equals an eager decode."""

from __future__ import annotations

import pickle
import zlib

import pytest

from pymq.client.simple_consumer import ReceivedMessage
from pymq.protocol.message import MessageExt, Prop, decode_message, iter_messages
from pymq.protocol.record import (
    SYSFLAG_COMPRESSED,
    decode_properties,
    encode_properties,
    encode_record,
    offset_msg_id,
    pack_host,
    parse_record,
    unpack_host,
)

PUBLIC = (
    "topic", "body", "flag", "sys_flag", "queue_id", "queue_offset", "commitlog_offset", "born_timestamp",
    "store_timestamp", "reconsume_times", "prepared_tx_offset", "store_size", "body_crc", "broker_name",
    "properties", "born_host", "store_host", "tags", "keys", "msg_id", "offset_msg_id", "delay_level",
)  # fmt: skip

# every test runs with the C accelerator and with the pure-Python record code
pytestmark = pytest.mark.usefixtures("record_impl")


def _record(i: int, *, compressed: bool = False) -> bytes:
    body = bytes([i % 251]) * (i * 7)
    props = {"TAGS": f"tag{i % 3}", "KEYS": f"k{i} x{i}", "UNIQ_KEY": f"U{i:031d}", "user": "v\u00e9"}
    if i % 4 == 0:
        props = {"DELAY": "2"}  # no tags, keys or unique id
    stored = zlib.compress(body) if compressed else body
    return encode_record(
        f"Topic{i % 2}".encode(),
        stored,
        encode_properties(props),
        flag=i,
        sys_flag=SYSFLAG_COMPRESSED if compressed else 0,
        born_timestamp=1_700_000_000_000 + i,
        born_host=pack_host("10.0.0.2", 1000 + i),
        reconsume_times=i % 5,
        prepared_tx_offset=i * 3,
        queue_id=i % 4,
        queue_offset=i,
        physical_offset=i * 1000,
        store_timestamp=1_700_000_000_500 + i,
        store_host=pack_host("10.0.0.1", 10911),
    )


def _eager(rec: bytes, broker: str) -> dict[str, object]:
    """An independent eager decode of one record (parse_record + decode_properties)."""
    r = parse_record(rec)
    props = decode_properties(r.properties)
    body = bytes(r.body)
    if r.sys_flag & SYSFLAG_COMPRESSED:
        body = zlib.decompress(body)
    keys = props.get(Prop.KEYS)
    return {
        "topic": r.topic.decode(), "body": body, "flag": r.flag, "sys_flag": r.sys_flag, "queue_id": r.queue_id,
        "queue_offset": r.queue_offset, "commitlog_offset": r.physical_offset, "born_timestamp": r.born_timestamp,
        "store_timestamp": r.store_timestamp, "reconsume_times": r.reconsume_times,
        "prepared_tx_offset": r.prepared_tx_offset, "store_size": r.total_size, "body_crc": r.body_crc,
        "broker_name": broker, "properties": props, "born_host": unpack_host(r.born_host),
        "store_host": unpack_host(r.store_host), "tags": props.get(Prop.TAGS),
        "keys": keys.split(" ") if keys else [],
        "msg_id": props.get(Prop.UNIQ_KEY) or offset_msg_id(r.store_host, r.physical_offset),
        "offset_msg_id": offset_msg_id(r.store_host, r.physical_offset), "delay_level": int(props.get("DELAY", 0)),
    }  # fmt: skip


def _public(m: MessageExt) -> dict[str, object]:
    return {name: getattr(m, name) for name in PUBLIC}


def test_every_field_equals_an_eager_decode() -> None:
    """Each public attribute of messages decoded from one buffer equals the eager decode, in any access order."""
    recs = [_record(i, compressed=i % 5 == 3) for i in range(40)]
    buf = memoryview(b"".join(recs))
    msgs = list(iter_messages(buf, broker_name="broker-a"))
    assert len(msgs) == len(recs)
    for i, (m, rec) in enumerate(zip(msgs, recs, strict=True)):
        want = _eager(rec, "broker-a")
        names = PUBLIC if i % 2 else tuple(reversed(PUBLIC))  # tags before properties, and after
        assert {n: getattr(m, n) for n in names} == want
        assert m.to_dict()["msgId"] == want["msg_id"]
        assert m.body_size == len(want["body"])  # type: ignore[arg-type]
        assert _public(decode_message(rec, broker_name="broker-a")) == want


def test_body_size_does_not_copy_the_body() -> None:
    """body_size is the body's length, read from the record (a compressed body: the inflated one)."""
    m = decode_message(_record(9))
    assert m.body_size == 63 and m._body is None
    assert decode_message(_record(8, compressed=True)).body_size == 56


def test_single_properties_without_the_map() -> None:
    """get_property, tags, keys and msg_id read one property; a later full decode agrees."""
    m = decode_message(_record(5))
    assert (m.tags, m.keys, m.get_property("user"), m.get_property("absent")) == ("tag2", ["k5", "x5"], "v\u00e9", None)
    assert m._properties is None  # nothing decoded the map yet
    assert m.properties["user"] == "v\u00e9" and m.get_property("user") == "v\u00e9"


def test_attributes_stay_assignable() -> None:
    """Listeners and the SDK assign topic, reconsume_times, properties, body and the fixed fields."""
    m = decode_message(_record(6))
    m.topic = "Other"
    m.reconsume_times += 1
    m.queue_offset = 99
    m.body = b"new"
    m.properties = {"TAGS": "x"}
    assert (m.topic, m.reconsume_times, m.queue_offset, m.body, m.tags) == ("Other", 2, 99, b"new", "x")
    assert m.flag == 6 and m.commitlog_offset == 6000  # the others are untouched


def test_pickle_and_detach_copy_only_the_record() -> None:
    """A pickled (or detached) message carries its own record, not the whole pull buffer."""
    recs = [_record(i) for i in range(1, 4)]
    msgs = list(iter_messages(memoryview(b"".join(recs)), broker_name="b"))
    m = msgs[1]
    m.topic = "Renamed"
    copy = pickle.loads(pickle.dumps(m))
    assert _public(copy) == {**_eager(recs[1], "b"), "topic": "Renamed"}
    assert bytes(copy._buf) == recs[1]
    assert _public(msgs[2].detach()) == _eager(recs[2], "b") and msgs[2]._buf == recs[2]


def test_received_messages_are_lazy_messages_of_their_class() -> None:
    """A ReceivedMessage made by iter_messages reads every field as an eager decode does."""
    for rec in (_record(7), _record(8, compressed=True)):
        r = next(iter_messages(rec, broker_name="b", message_class=ReceivedMessage))
        r.receipt_handle = "handle"
        assert type(r) is ReceivedMessage
        assert _public(r) == _eager(rec, "b") and r.receipt_handle == "handle"


def test_decompress_off_gives_the_stored_body() -> None:
    """decode_message/iter_messages with decompress=False keep a compressed body as stored."""
    rec = _record(8, compressed=True)
    stored = bytes(parse_record(rec).body)
    assert decode_message(rec, decompress=False).body == stored
    assert next(iter_messages(rec, decompress=False)).body == stored
    assert decode_message(rec).body == zlib.decompress(stored)
