"""Regression tests for what the atheris fuzzers (fuzz/) found: each replays the input that found it.

The inputs are the crash/timeout files libFuzzer wrote, base64 here; the target that found
each is named (fuzz/targets.py), and ``python fuzz/fuzz_one.py TARGET FILE`` replays one.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from pymq.broker.pop.records import CheckPoint, parse_ack
from pymq.broker.timer.timer_log import UNIT, UNIT_SIZE, TimerLog
from pymq.protocol.frame import Command, FrameDecoder, encode_bytes
from pymq.security import signing
from pymq.security.signing import MAX_VALUE_DEPTH, SignatureError, canonical, verify


def nested(depth: int, leaf: object) -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


# --- signing: a nested header value made the canonical form exponential -------------------------------------

# (target "signing") bytes 0-1: code and opaque; the rest a msgpack ext whose value nests 36 lists deep.
# Each level JSON-quoted the level below again, doubling its backslashes: 2^36 bytes, before any signature check.
SIGNING_TIMEOUT = base64.b64decode(
    "CwKEecPLhABSLAAApCl5w6F6y5GRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRhABSLAAEAAAA"
)


def test_fuzz_signing_deep_value_is_refused_at_once() -> None:
    ext = msgpack.unpackb(SIGNING_TIMEOUT[2:], strict_map_key=False)
    started = time.monotonic()
    with pytest.raises(SignatureError, match="nested"):
        canonical(SIGNING_TIMEOUT[0], SIGNING_TIMEOUT[1], ext, b"")
    # What a server does with it: a forged request of this ext is refused, quickly, as a SignatureError.
    cmd = Command(11, 2, 0, None, {**ext, signing.SIGNATURE: "x", signing.TIMESTAMP: 5}, b"")
    with pytest.raises(SignatureError):
        verify(cmd, "sk", 5, 1000)
    assert time.monotonic() - started < 1


def test_fuzz_signing_canonical_form_is_linear_in_nesting() -> None:
    """Quotes and backslashes nested to the deepest allowed level: the text grows by a few bytes a level."""
    value = nested(MAX_VALUE_DEPTH - 1, 'a"\\b')
    text = canonical(1, 1, {"k": value}, b"")
    assert len(text) < 200
    deeper = canonical(1, 1, {"k": [value]}, b"")
    assert len(deeper) - len(text) <= 4  # one more "[" "]" pair (quoted once at the top)
    with pytest.raises(SignatureError):
        canonical(1, 1, {"k": [[value]]}, b"")  # a scalar MAX_VALUE_DEPTH + 1 lists deep


def test_fuzz_signing_nested_values_still_sign_and_verify_after_the_wire() -> None:
    creds = signing.Credentials("ak", "sk")
    ext = {"keys": [["a", "b"], {"x": ["y", 1]}], "deep": nested(MAX_VALUE_DEPTH, "z")}
    cmd = Command(10, 7, 0, None, dict(ext), b"body")
    signing.sign(cmd, creds, 1_000)
    [got] = FrameDecoder().feed(encode_bytes(cmd))
    assert verify(got, "sk", 1_000, 10) == cmd.ext[signing.SIGNATURE]
    # A nested item cannot pass for its quoted text, nor one list for two.
    for forged in ({"keys": ['["a","b"]', {"x": ["y", 1]}]}, {"keys": [["a"], ["b"], {"x": ["y", 1]}]}):
        fields = {k: cmd.ext[k] for k in signing.SIGNING_FIELDS}
        other = Command(10, 7, 0, None, {**forged, "deep": ext["deep"], **fields}, b"body")
        with pytest.raises(SignatureError, match="mismatch"):
            verify(other, "sk", 1_000, 10)


def test_fuzz_signing_flat_values_sign_as_before() -> None:
    """Scalars and lists of scalars write exactly what signing v2 wrote (deployed clients still verify)."""
    text = canonical(3, 4, {"a": "x", "b": 5, "c": ["p,q", 2, None], "d": {"k": "v"}}, b"D")
    assert text == b'pymq-sign-v2\n3\n4\n"a"="x"\n"b"="5"\n"c"="[\\"p,q\\",\\"2\\",\\"\\"]"\n"d"="{\\"k\\":\\"v\\"}"\nD'


# --- timer log: a corrupt chain link looped forever ---------------------------------------------------------

# (target "timer_files") two segments of 8 units; the unit at 40 links back to 40 (itself) in slot 1000.
TIMER_TIMEOUT = base64.b64decode(
    "//////////8AAAAAAAADAAAAAAAAA+kAAADdAAAAEAAAAADIVEkAAAAAAAAAAAAoAAAAAAAAA+gAAAAAAAAD6gAAAAAAACAAAAAAyFRJ"
    "AAAAAAAAAAAAUAAAAAAAAAPoAAAAAAAAA+sAAAAAAAAAIAAAAADIVEkAAAAAAAAAAABQAAAAAAAAA+gAAAAAAAAD6wAAAAAAAAAAAAAA"
    "AAAAAAAAAAAwAAAAAMhUSQAA"
)


def _log_of(tmp_path: Path, data: bytes) -> TimerLog:
    size = UNIT_SIZE * 8
    seg = data[: 2 * size].ljust(2 * size, b"\x00")
    (tmp_path / f"{0:020d}").write_bytes(seg[:size])
    (tmp_path / f"{size:020d}").write_bytes(seg[size:])
    log = TimerLog(tmp_path, size)
    log.load()
    return log


def test_fuzz_timer_chain_with_a_self_link_ends(tmp_path: Path) -> None:
    log = _log_of(tmp_path, TIMER_TIMEOUT)
    try:
        assert [u.pos for u in log.chain(40, 1000)] == [40]
        units = list(log.scan(0))
        assert len(units) == 2
        for u in units:
            assert [c.pos for c in log.chain(u.pos, u.slot_ms)] == [u.pos]
    finally:
        log.close()


def test_fuzz_timer_chain_ignores_forward_and_unaligned_links(tmp_path: Path) -> None:
    magic = 0x54490000
    units = [
        UNIT.pack(-1, 5, 5, 0, 1, magic),
        UNIT.pack(0, 5, 5, 0, 1, magic),
        UNIT.pack(UNIT_SIZE * 3, 5, 5, 0, 1, magic),  # forward: corrupt
        UNIT.pack(UNIT_SIZE * 2 + 3, 5, 5, 0, 1, magic),  # unaligned: corrupt (and near a segment's end)
    ]
    log = _log_of(tmp_path, b"".join(units))
    try:
        assert [u.pos for u in log.chain(UNIT_SIZE, 5)] == [0, UNIT_SIZE]
        assert [u.pos for u in log.chain(UNIT_SIZE * 2, 5)] == [UNIT_SIZE * 2]
        assert [u.pos for u in log.chain(UNIT_SIZE * 3, 5)] == [UNIT_SIZE * 3]
        assert log.read(UNIT_SIZE * 8 - 3) is None  # would have read past the segment's end
    finally:
        log.close()


# --- pop revive records: numbers out of range escaped the replay's error handling ----------------------------

# (target "pop_records") a checkpoint whose pop time is beyond int64: accepted, then to_record raised struct.error.
POP_CRASH = base64.b64decode(
    "eyJjIjoiRyIsInQiOiIiLCJxIjoxLCJvIjpbXSwibmIiOjEwLCJwdCI6MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMT"
    "ExMTExMTExMTExMTExMTExMTExMTExMTExMTEsIml0IjozMH0="
)


@pytest.mark.parametrize(
    "body",
    [
        POP_CRASH,
        b'{"c":"G","t":"T","q":1,"o":[100000000000000000000],"nb":1,"pt":1,"it":1}',  # array("q") OverflowError
        b'{"c":"G","t":"T","q":1,"o":[],"nb":1,"pt":Infinity,"it":1}',  # int(inf): OverflowError
        b"[" * 100_000,  # json's RecursionError
        b"[1, 2]",  # not an object
    ],
)
def test_fuzz_pop_checkpoint_out_of_range_is_a_value_error(body: bytes) -> None:
    """The revive replay skips a record on ValueError/KeyError/TypeError; nothing else may come out."""
    with pytest.raises(ValueError):
        CheckPoint.from_body(body)


@pytest.mark.parametrize("body", [b'{"ck":Infinity,"i":[]}', b'{"ck":1,"i":[-Infinity]}', b"[" * 100_000, b"7"])
def test_fuzz_pop_ack_out_of_range_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        parse_ack(body)


def test_fuzz_pop_checkpoint_in_range_round_trips() -> None:
    from pymq.protocol.record import parse_record

    body = json.dumps({"c": "G", "t": "T", "q": 1, "o": [2**63 - 1], "nb": 1, "pt": 2**63 - 1, "it": 0}).encode()
    ck = CheckPoint.from_body(body)
    assert CheckPoint.from_body(parse_record(ck.to_record("R")).body) == ck


# --- grpc_mapping: what a 5.x client's SendMessage / Telemetry may carry ------------------------------------


def _target(name: str) -> Any:
    """One of fuzz/targets.py's targets (fuzz/ is not a package)."""
    import sys

    fuzz = Path(__file__).resolve().parents[2] / "fuzz"
    sys.path.insert(0, str(fuzz))
    try:
        import targets
    finally:
        sys.path.remove(str(fuzz))
    return targets.TARGETS[name]


def _grpc_target() -> Any:
    return _target("grpc_mapping")


# (target "grpc_mapping", found by libFuzzer with the dictionary's "REAL_TOPIC") byte 0: SendMessageRequest; a
# message whose user properties name REAL_TOPIC. The front end stored it as a pymq property the broker's delay,
# timer and transaction paths read (REAL_TOPIC, REAL_QID, TRAN_MSG, PGROUP ... likewise), and to_v2 hid it from
# 5.x consumers: what was sent did not come back.
GRPC_SYSTEM_PROPERTY = base64.b64decode(
    "AAp5CgQSAnQ1EhEKClJFQUxfVE9QSUMSA2EgYhIMCgVjb2xvchIDcmVkGkUKAVQaIjAxQTFCMkMzRDRFNUY2MDcxODI5M0E0QjVDMDAw"
    "MDAwMDEoATAEOgsIgOLPqgYQwJaxAkIGaG9zdC0xmgECCAUiCQABYmluYXJ5/w=="
)


def test_fuzz_grpc_user_property_naming_a_system_property_is_refused() -> None:
    from pymq.grpc_proxy import mapping
    from pymq.grpc_proxy.pb import definition_pb2 as pb
    from pymq.grpc_proxy.pb import service_pb2 as spb

    _grpc_target()(GRPC_SYSTEM_PROPERTY)
    (m,) = spb.SendMessageRequest.FromString(GRPC_SYSTEM_PROPERTY[1:]).messages
    assert dict(m.user_properties) == {"REAL_TOPIC": "a b", "color": "red"}
    with pytest.raises(mapping.MappingError) as err:
        mapping.to_pymq(m, 1 << 20)
    assert err.value.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY and "REAL_TOPIC" in err.value.message
    for key in ("TRAN_MSG", "PGROUP", "REAL_QID", "RETRY_TOPIC", "PRIORITY", "WAIT", "__transactionId__", "a\x01b"):
        m.user_properties.clear()
        m.user_properties[key] = "true"
        with pytest.raises(mapping.MappingError) as err:
            mapping.to_pymq(m, 1 << 20)
        assert err.value.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY, key
    m.user_properties.clear()
    m.user_properties["real_topic"] = "x\x02TRAN_MSG\x01true"  # a value that would split into two properties
    with pytest.raises(mapping.MappingError) as err:
        mapping.to_pymq(m, 1 << 20)
    assert err.value.code == pb.BAD_REQUEST
    m.user_properties["real_topic"] = "fine"  # not a system name: kept, and read back by a 5.x consumer
    assert mapping.to_pymq(m, 1 << 20).message.properties == {"real_topic": "fine"}


@pytest.mark.parametrize(
    ("field", "code"),
    [("tag", "ILLEGAL_MESSAGE_TAG"), ("keys", "ILLEGAL_MESSAGE_KEY"), ("message_group", "ILLEGAL_MESSAGE_GROUP")],
)
def test_fuzz_grpc_separators_in_tag_keys_or_group_are_refused_by_field(field: str, code: str) -> None:
    """\\x01/\\x02 would end up in the record's property string; before, pymq's producer refused them as a
    ClientError (a BAD_REQUEST naming no field); now the field's own code."""
    from pymq.grpc_proxy import mapping
    from pymq.grpc_proxy.pb import definition_pb2 as pb

    sp = pb.SystemProperties(message_id="id")
    if field == "keys":
        sp.keys.append("k\x02KEYS\x01x")
    else:
        setattr(sp, field, "a\x01b")
    m = pb.Message(topic=pb.Resource(name="t"), body=b"x", system_properties=sp)
    with pytest.raises(mapping.MappingError) as err:
        mapping.to_pymq(m, 1 << 20)
    assert err.value.code == getattr(pb, code)


def test_fuzz_grpc_unknown_message_type_is_a_bad_request_not_a_value_error() -> None:
    """(target "grpc_mapping", its first hand-made input) a message_type protobuf keeps without a name (an open
    enum: 7) reached check_type, whose pb.MessageType.Name(7) raised ValueError: SendMessage answered gRPC
    INTERNAL instead of a v2 status."""
    from pymq.grpc_proxy import mapping
    from pymq.grpc_proxy.pb import definition_pb2 as pb
    from pymq.grpc_proxy.pb import service_pb2 as spb
    from pymq.protocol.message import Message

    sp = pb.SystemProperties(message_id="id", tag="T", message_type=7)  # type: ignore[arg-type]
    m = pb.Message(topic=pb.Resource(name="t"), body=b"x", system_properties=sp)
    _grpc_target()(b"\x00" + spb.SendMessageRequest(messages=[m]).SerializeToString())
    with pytest.raises(mapping.MappingError) as err:
        mapping.to_pymq(m, 1 << 20)
    assert err.value.code == pb.BAD_REQUEST and "message_type 7" in err.value.message
    out = mapping.Outgoing(Message("t", b"x"), "id", None, 7)  # check_type alone names it by number
    with pytest.raises(mapping.MappingError, match="not 7"):
        mapping.check_type(out, [pb.NORMAL])


def test_fuzz_grpc_unknown_user_agent_language_is_other() -> None:
    """A Telemetry settings' user_agent.language without a name (99) made client_language raise ValueError
    (registration with the brokers failed, logged with a traceback per settings)."""
    from pymq.grpc_proxy import mapping
    from pymq.grpc_proxy.pb import definition_pb2 as pb
    from pymq.grpc_proxy.pb import service_pb2 as spb

    agent = pb.UA(language=99, version="5.1.2")  # type: ignore[arg-type]
    assert mapping.client_language("", agent) == "OTHER"
    assert mapping.client_language("", pb.UA(language=pb.PYTHON)) == "PYTHON"
    settings = pb.Settings(client_type=pb.PRODUCER, user_agent=agent)
    _grpc_target()(b"\x0a" + spb.TelemetryCommand(settings=settings).SerializeToString())


# --- remoting: a JSON header's empty extFields key did not survive the binary header ---------------------------

# (target "remoting", under ASan + UBSan, 2026-11-28) a JSON SEND_MESSAGE_V2 whose extFields hold a "" key: the
# JSON decoder took it, and the ROCKETMQ (binary) form of the same command was refused ("extFields key: empty
# key"). RocketMQ's binary decoder reads an empty key like any other; pymq's now does too.
REMOTING_EMPTY_EXT_KEY = base64.b64decode(
    "AAABEQAAAQh7ImNvZGUiOjMxMCwiZXh0RmllbGRzIjp7ImEiOiJQRyIsImIiOiJUIiwiYyI6IlRCVzEwMiIsImQiOiI0IiwiZSI6"
    "IjEiLCJmIjoiMCIsImciOiIxNzAwMDAwMDAwMDAwIiwiaCI6IjAiLCJpIjoiVEFHU1x1MDAwMWFcdTAwMDNLRVlTXHUwMDAxa1x1"
    "MDAwMiIsImoiOiIwayIsIiI6ImZhbHNlIiwibSI6ImZhbHNlIn0sImZsYWciOjAsImxhbmd1YWdlIjoiSkFWQSIsIm9wYXF1ZSI6"
    "MSwic2VyaWFsaXplVHlwZUN1cnJlbnRSUEMiOiJKU09OIiwidmVyc2lvbiI6MH1oZWxsbw=="
)


def test_fuzz_remoting_empty_ext_key_survives_both_header_types() -> None:
    _target("remoting")(REMOTING_EMPTY_EXT_KEY)  # raised RemotingFrameError before the fix
    from pymq.remoting import command as rc
    from pymq.remoting.command import RemotingCommand, SerializeType

    cmd = RemotingCommand(310, ext_fields={"": "x", "a": "PG"}, serialize_type=SerializeType.ROCKETMQ)
    assert rc.decode_frame(rc.encode(cmd)).ext_fields == {"": "x", "a": "PG"}
