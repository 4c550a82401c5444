"""The message record codec, properties, message ids, decoding helpers and tag filters."""

from __future__ import annotations

import re
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymq.errors import LocalProtocolError, MessageDecodeError
from pymq.protocol.filter import Subscription, parse_tags
from pymq.protocol.message import UniqueIdGenerator, decode_message, iter_messages
from pymq.protocol.record import (
    BROKER_BLOCK,
    BROKER_BLOCK_OFFSET,
    MAGIC,
    MIN_RECORD_SIZE,
    SYSFLAG_COMPRESSED,
    blank_marker,
    decode_offset_msg_id,
    decode_properties,
    encode_properties,
    encode_record,
    find_property,
    offset_msg_id,
    pack_host,
    parse_record,
    record_store_timestamp,
    tag_hash,
    unpack_host,
)

# every test runs with the C accelerator and with the pure-Python record code
pytestmark = pytest.mark.usefixtures("record_impl")

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

prop_chars = st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"])
prop_text = st.text(alphabet=prop_chars, max_size=20)
props_dicts = st.dictionaries(prop_text, prop_text, max_size=6)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


def sample(**kw) -> bytes:
    args = dict(topic=b"TopicA", body=b"hello", properties=encode_properties({"TAGS": "t1", "KEYS": "k"}))
    args.update(kw)
    return encode_record(args.pop("topic"), args.pop("body"), args.pop("properties"), **args)


@SETTINGS
@given(
    topic=st.binary(max_size=300),
    body=st.binary(max_size=2000),
    props=props_dicts,
    ints=st.tuples(i32, i32, i64, i32, i64, i32, i64, i64, i64),
)
def test_record_round_trip(topic: bytes, body: bytes, props: dict[str, str], ints: tuple) -> None:
    """encode_record then parse_record returns every field unchanged (with crc checking on)."""
    flag, sys_flag, born, recon, prep, qid, qoff, phys, sts = ints
    raw = encode_properties(props)
    born_host = pack_host("1.2.3.4", 5)
    rec = encode_record(
        topic,
        body,
        raw,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born,
        born_host=born_host,
        reconsume_times=recon,
        prepared_tx_offset=prep,
        queue_id=qid,
        queue_offset=qoff,
        physical_offset=phys,
        store_timestamp=sts,
        store_host=pack_host("10.0.0.9", 10911),
    )
    r = parse_record(rec, check_crc=True)
    assert r.total_size == len(rec)
    assert (r.topic, bytes(r.body), r.properties) == (topic, body, raw)
    assert (r.flag, r.sys_flag, r.born_timestamp, r.reconsume_times, r.prepared_tx_offset) == (
        flag,
        sys_flag,
        born,
        recon,
        prep,
    )
    assert (r.queue_id, r.queue_offset, r.physical_offset, r.store_timestamp) == (qid, qoff, phys, sts)
    assert unpack_host(r.born_host) == "1.2.3.4:5" and unpack_host(r.store_host) == "10.0.0.9:10911"
    assert r.body_crc == zlib.crc32(body)
    assert decode_properties(r.properties) == props


@SETTINGS
@given(props_dicts)
def test_properties_round_trip(props: dict[str, str]) -> None:
    """decode_properties inverts encode_properties, with or without the trailing separator."""
    raw = encode_properties(props)
    assert decode_properties(raw) == props
    assert decode_properties(raw.removesuffix(b"\x02")) == props
    assert decode_properties(memoryview(raw)) == props


@SETTINGS
@given(st.binary(min_size=MIN_RECORD_SIZE, max_size=400), st.data())
def test_corrupt_records_raise_only_decode_error(noise: bytes, data: st.DataObject) -> None:
    """Mutated or truncated records parse or raise MessageDecodeError, never anything else."""
    rec = bytearray(sample(body=noise[:50]))
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(rec) - 1))
        rec[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(rec)))
    for buf in (bytes(rec), bytes(rec[:cut]), noise, struct.pack(">iI", len(noise), MAGIC) + noise[8:]):
        try:
            parse_record(buf, check_crc=True)
        except MessageDecodeError:
            pass


def test_layout_offsets() -> None:
    """Documented offsets hold (queue_id 48, queue_offset 52, physical 60, ts 68, host 76, body 88)."""
    rec = sample(
        queue_id=7,
        queue_offset=123456789012,
        physical_offset=987654321098,
        store_timestamp=1700000000123,
        store_host=pack_host("192.168.1.2", 10911),
        flag=3,
        sys_flag=0,
        born_timestamp=1699999999999,
    )
    assert struct.unpack_from(">i", rec, 0)[0] == len(rec)
    assert struct.unpack_from(">I", rec, 4)[0] == MAGIC
    assert struct.unpack_from(">I", rec, 8)[0] == zlib.crc32(b"hello")
    assert struct.unpack_from(">i", rec, 12)[0] == 3
    assert struct.unpack_from(">q", rec, 20)[0] == 1699999999999
    assert struct.unpack_from(">i", rec, 48)[0] == 7
    assert struct.unpack_from(">q", rec, 52)[0] == 123456789012
    assert struct.unpack_from(">q", rec, 60)[0] == 987654321098
    assert struct.unpack_from(">q", rec, 68)[0] == 1700000000123
    assert record_store_timestamp(rec, 0) == 1700000000123
    assert unpack_host(rec[76:84]) == "192.168.1.2:10911"
    assert struct.unpack_from(">i", rec, 84)[0] == 5
    assert rec[88:93] == b"hello"
    assert struct.unpack_from(">H", rec, 93)[0] == 6 and rec[95:101] == b"TopicA"


def test_broker_block_patch() -> None:
    """Patching the broker block in place changes only those fields and keeps the record valid."""
    rec = bytearray(sample())
    before = parse_record(bytes(rec))
    BROKER_BLOCK.pack_into(rec, BROKER_BLOCK_OFFSET, 3, 42, 4096, 1234, pack_host("10.1.1.1", 9))
    r = parse_record(rec, check_crc=True)
    assert (r.queue_id, r.queue_offset, r.physical_offset, r.store_timestamp) == (3, 42, 4096, 1234)
    assert unpack_host(r.store_host) == "10.1.1.1:9"
    assert (r.topic, bytes(r.body), r.properties, r.born_timestamp) == (
        before.topic,
        bytes(before.body),
        before.properties,
        before.born_timestamp,
    )


def test_parse_at_position() -> None:
    """parse_record reads the record at pos inside a larger buffer."""
    a, b = sample(body=b"one"), sample(body=b"two", queue_offset=1)
    r = parse_record(a + b, len(a))
    assert bytes(r.body) == b"two" and r.queue_offset == 1


def _with_int(rec: bytes, pos: int, fmt: str, value: int) -> bytes:
    buf = bytearray(rec)
    struct.pack_into(fmt, buf, pos, value)
    return bytes(buf)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: _with_int(r, 4, ">I", 0xDEADBEEF),  # bad magic
        lambda r: _with_int(r, 0, ">i", len(r) + 1),  # total beyond buffer
        lambda r: _with_int(r, 0, ">i", 10),  # total below minimum
        lambda r: _with_int(r, 0, ">i", -5),  # negative total
        lambda r: _with_int(r, 84, ">i", -1),  # negative body length
        lambda r: _with_int(r, 84, ">i", 10_000),  # body length beyond record
        lambda r: _with_int(r, 93, ">H", 500),  # topic length beyond record
        lambda r: _with_int(r, 101, ">H", 1),  # properties length does not add up
        lambda r: r[:-1],  # truncated
        lambda r: r[:50],  # truncated below minimum
        lambda r: b"",  # nothing
    ],
    ids=[
        "magic",
        "total-big",
        "total-small",
        "total-neg",
        "body-neg",
        "body-big",
        "topic-big",
        "props",
        "trunc-1",
        "trunc-50",
        "empty",
    ],
)
def test_corrupt_record_examples(mutate) -> None:
    """Each kind of corruption raises MessageDecodeError."""
    with pytest.raises(MessageDecodeError):
        parse_record(mutate(sample()))


def test_crc_mismatch_only_with_check_crc() -> None:
    """A flipped body byte is caught with check_crc=True and ignored without it."""
    rec = bytearray(sample())
    rec[88] ^= 0xFF
    parse_record(rec)
    with pytest.raises(MessageDecodeError, match="crc"):
        parse_record(rec, check_crc=True)


def test_encode_limits() -> None:
    """Over-long topics and properties are refused at encode time."""
    with pytest.raises(LocalProtocolError):
        encode_record(b"t" * 0x10000, b"", b"")
    with pytest.raises(LocalProtocolError):
        encode_record(b"t", b"", b"x" * 32768)


@pytest.mark.parametrize("props", [{"a\x01": "v"}, {"a": "v\x02"}, {"k\x02": "v"}, {"k": "\x01"}])
def test_reserved_bytes_rejected(props: dict[str, str]) -> None:
    """Keys or values containing \\x01 or \\x02 are refused."""
    with pytest.raises(LocalProtocolError):
        encode_properties(props)


def test_properties_edge_cases() -> None:
    """Empty maps encode to b''; non-str values are stringified; items without \\x01 are skipped."""
    assert encode_properties({}) == b""
    assert decode_properties(b"") == {}
    assert encode_properties({"n": 5}) == b"n\x015\x02"  # type: ignore[dict-item]
    assert decode_properties(b"junk\x02a\x01b\x02\x02") == {"a": "b"}


PROPS = b"TAGS\x01tagA\x02XTAGS\x01x\x02KEYS\x01k1 k2\x02LAST\x01end"


@pytest.mark.parametrize(
    ("props", "key", "want"),
    [
        (PROPS, b"TAGS\x01", b"tagA"),  # at the start
        (PROPS, b"KEYS\x01", b"k1 k2"),  # middle
        (PROPS, b"LAST\x01", b"end"),  # end, no trailing separator
        (PROPS + b"\x02", b"LAST\x01", b"end"),  # end with separator
        (PROPS, b"NONE\x01", None),  # absent
        (b"XTAGS\x01x\x02", b"TAGS\x01", None),  # only as the suffix of another key
        (b"XTAGS\x01x\x02TAGS\x01y\x02", b"TAGS\x01", b"y"),  # suffix key first, real key later
        (b"A\x01\x02", b"A\x01", b""),  # empty value
        (b"", b"TAGS\x01", None),
    ],
)
def test_find_property(props: bytes, key: bytes, want: bytes | None) -> None:
    """find_property returns the raw value of exactly that key, or None."""
    assert find_property(props, key) == want


@SETTINGS
@given(props_dicts, prop_text)
def test_find_property_agrees_with_decode(props: dict[str, str], key: str) -> None:
    """find_property agrees with decode_properties for any key, present or not."""
    raw = encode_properties(props)
    for k in [key, *props]:
        got = find_property(raw, k.encode() + b"\x01")
        want = props.get(k)
        assert got == (want.encode() if want is not None else None)


def test_tag_hash() -> None:
    """tag_hash is crc32 of the tag, equal for str and bytes, and 0 for no tag."""
    assert tag_hash(None) == 0 and tag_hash("") == 0 and tag_hash(b"") == 0
    assert tag_hash("TagA") == zlib.crc32(b"TagA") == tag_hash(b"TagA")
    assert tag_hash("TagA") != tag_hash("TagB")


@SETTINGS
@given(st.tuples(*[st.integers(0, 255)] * 4), st.integers(0, 65535), i64)
def test_offset_msg_id_round_trip(ip: tuple[int, ...], port: int, offset: int) -> None:
    """offset_msg_id gives 32 uppercase hex chars and decodes back to host:port and offset."""
    host = ".".join(map(str, ip))
    mid = offset_msg_id(pack_host(host, port), offset)
    assert re.fullmatch(r"[0-9A-F]{32}", mid)
    assert decode_offset_msg_id(mid) == (f"{host}:{port}", offset)


@pytest.mark.parametrize("bad", ["", "zz" * 16, "AB" * 15, "AB" * 17])
def test_decode_offset_msg_id_rejects_bad_ids(bad: str) -> None:
    """Non-hex or wrong-length ids raise MessageDecodeError."""
    with pytest.raises(MessageDecodeError):
        decode_offset_msg_id(bad)


def test_pack_host_non_ipv4() -> None:
    """A non-IPv4 host is recorded as 0.0.0.0 with its port."""
    assert unpack_host(pack_host("::1", 80)) == "0.0.0.0:80"


def test_decode_message_fields() -> None:
    """decode_message fills MessageExt from the record, including tags, keys and ids."""
    props = encode_properties({"TAGS": "t1", "KEYS": "a b", "UNIQ_KEY": "U1", "DELAY": "3"})
    rec = sample(
        properties=props,
        queue_id=2,
        queue_offset=5,
        physical_offset=100,
        store_host=pack_host("10.0.0.1", 10911),
        born_host=pack_host("10.0.0.2", 1234),
        reconsume_times=1,
        flag=9,
    )
    m = decode_message(rec, broker_name="broker-a")
    assert (m.topic, m.body, m.tags, m.keys) == ("TopicA", b"hello", "t1", ["a", "b"])
    assert (m.msg_id, m.delay_level) == ("U1", 3)
    assert (m.queue_id, m.queue_offset, m.commitlog_offset, m.store_size) == (2, 5, 100, len(rec))
    assert (m.store_host, m.born_host, m.reconsume_times, m.flag) == ("10.0.0.1:10911", "10.0.0.2:1234", 1, 9)
    assert m.broker_name == "broker-a"
    assert decode_offset_msg_id(m.offset_msg_id) == ("10.0.0.1:10911", 100)
    assert m.to_dict()["msgId"] == "U1"


def test_decode_compressed_body() -> None:
    """A SYSFLAG_COMPRESSED body is inflated unless decompress=False."""
    plain = b"abc" * 1000
    rec = sample(body=zlib.compress(plain), sys_flag=SYSFLAG_COMPRESSED)
    assert decode_message(rec).body == plain
    assert decode_message(rec, decompress=False).body == zlib.compress(plain)
    with pytest.raises(MessageDecodeError):
        decode_message(sample(body=b"not zlib", sys_flag=SYSFLAG_COMPRESSED))


def test_iter_messages_stops_at_blank() -> None:
    """iter_messages decodes concatenated records and stops at a blank marker."""
    recs = [sample(body=bytes([i]) * i, queue_offset=i) for i in range(3)]
    recs.append(sample(body=zlib.compress(b"zz"), sys_flag=SYSFLAG_COMPRESSED, queue_offset=3))
    buf = b"".join(recs) + blank_marker(64) + sample(body=b"after")
    msgs = list(iter_messages(buf, broker_name="b"))
    assert [m.queue_offset for m in msgs] == [0, 1, 2, 3]
    assert [m.body for m in msgs] == [b"", b"\x01", b"\x02\x02", b"zz"]
    assert all(m.broker_name == "b" for m in msgs)
    assert list(iter_messages(b"")) == []


def test_iter_messages_corrupt_raises_decode_error() -> None:
    """A corrupt record inside a pull body raises MessageDecodeError."""
    buf = sample() + _with_int(sample(), 4, ">I", 1)
    with pytest.raises(MessageDecodeError):
        list(iter_messages(buf))


def test_decode_message_bad_topic_raises_decode_error() -> None:
    """A record whose topic bytes are not UTF-8 raises MessageDecodeError, not UnicodeDecodeError."""
    with pytest.raises(MessageDecodeError):
        decode_message(sample(topic=b"\xff\xfeTopic"))


def test_unique_ids() -> None:
    """UniqueIdGenerator ids are 32 uppercase hex chars and unique over 100k calls."""
    gen = UniqueIdGenerator("10.0.0.1")
    ids = [gen.next_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 for i in ids)
    assert re.fullmatch(r"[0-9A-F]{32}", ids[0]) and re.fullmatch(r"[0-9A-F]{32}", ids[-1])
    assert ids[0].startswith("0A000001")
    assert UniqueIdGenerator("not-an-ip").next_id().startswith("7F000001")


def test_unique_ids_follow_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids of one millisecond share their head; each is prefix + ms since the month's start + counter."""
    import calendar

    from pymq.protocol import message

    gen = UniqueIdGenerator("10.0.0.1")
    prefix = gen._prefix  # ip, pid, random: the first 20 characters
    month_start = calendar.timegm((2026, 11, 1, 0, 0, 0, 0, 0, 0)) * 1000
    next_month = calendar.timegm((2026, 12, 1, 0, 0, 0, 0, 0, 0)) * 1000
    for now_ms, counter in [(month_start + 5, 0), (month_start + 5, 1), (month_start + 6, 2), (next_month, 3)]:
        monkeypatch.setattr(message.time, "time", lambda now_ms=now_ms: now_ms / 1000)
        start = month_start if now_ms < next_month else next_month
        assert gen.next_id() == f"{prefix}{now_ms - start:08X}{counter:04X}"


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("*", None),
        ("", None),
        (None, None),
        ("   ", None),
        ("A || B", frozenset({"A", "B"})),
        (" A||B ", frozenset({"A", "B"})),
        ("A", frozenset({"A"})),
        ("A || * ", None),
        ("A ||  || B", frozenset({"A", "B"})),
    ],
)
def test_parse_tags(expr: str | None, want: frozenset[str] | None) -> None:
    """parse_tags returns None for match-all expressions, else the set of trimmed tags."""
    assert parse_tags(expr) == want


def test_subscription() -> None:
    """Subscription.parse computes tag codes and matches; dict round trip keeps it."""
    sub = Subscription.parse("T", " A||B ", version=7)
    assert sub.tags == {"A", "B"} and sub.codes == {tag_hash("A"), tag_hash("B")}
    assert not sub.matches_all
    assert sub.matches("A") and not sub.matches("C") and not sub.matches(None)
    again = Subscription.from_dict(sub.to_dict())
    assert (again.topic, again.tags, again.codes, again.version) == ("T", sub.tags, sub.codes, 7)
    for expr in ("*", "", None):
        every = Subscription.parse("T", expr)
        assert every.matches_all and every.expression == "*" and every.matches(None) and every.matches("X")
