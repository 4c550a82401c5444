"""RemotingCommand codec against frames built by hand from RocketMQ 4.9's reference layout."""

from __future__ import annotations

import json
import struct

import pytest

from pymq.errors import FrameTooLargeError
from pymq.protocol.frame import Command, encode_bytes
from pymq.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, RequestCode, SerializeType
from pymq.remoting.command import (
    RemotingCommand,
    RemotingDecoder,
    RemotingFrameError,
    decode_frame,
    encode,
    encode_header,
    sniff,
)


def java_json_frame(header: str, body: bytes = b"") -> bytes:
    """A JSON frame as RemotingCommand.encodeHeader + NettyEncoder write it."""
    h = header.encode()
    return struct.pack(">iI", 4 + len(h) + len(body), len(h)) + h + body


def java_binary_header(code: int, lang: int, version: int, opaque: int, flag: int, remark: bytes, ext: list) -> bytes:
    """RocketMQSerializable.rocketMQProtocolEncode, written out from the Java source."""
    out = struct.pack(">hBhii", code, lang, version, opaque, flag)
    out += struct.pack(">i", len(remark)) + remark
    ext_bytes = b"".join(struct.pack(">H", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext)
    return out + struct.pack(">i", len(ext_bytes)) + ext_bytes


def java_binary_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (1 << 24) | len(header)) + header + body


FASTJSON_ROUTE_REQ = (
    '{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"CPP",'
    '"opaque":7,"serializeTypeCurrentRPC":"JSON","version":395}'
)


def test_json_request_from_a_client_decodes() -> None:
    cmd = decode_frame(java_json_frame(FASTJSON_ROUTE_REQ, b"xyz"))
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert cmd.language is LanguageCode.CPP
    assert (cmd.version, cmd.opaque, cmd.flag) == (395, 7, 0)
    assert cmd.ext_fields == {"topic": "TopicTest"}
    assert cmd.body == b"xyz"
    assert cmd.serialize_type is SerializeType.JSON
    assert cmd.extra == {}


def test_json_encode_is_what_fastjson_writes() -> None:
    cmd = RemotingCommand(code=105, language=LanguageCode.CPP, version=395, opaque=7, ext_fields={"topic": "TopicTest"})
    assert encode(cmd) == java_json_frame(FASTJSON_ROUTE_REQ)


def test_json_response_keeps_opaque_and_sets_response_bit() -> None:
    req = decode_frame(java_json_frame(FASTJSON_ROUTE_REQ))
    resp = req.response(17, remark="No topic route info in name server for the topic: TopicTest")
    frame = encode(resp)
    length, word = struct.unpack_from(">iI", frame)
    assert length == len(frame) - 4 and word >> 24 == 0
    header = json.loads(frame[8 : 8 + (word & 0xFFFFFF)])
    assert header == {
        "code": 17,
        "flag": FLAG_RESPONSE,
        "language": "JAVA",
        "opaque": 7,
        "remark": "No topic route info in name server for the topic: TopicTest",
        "serializeTypeCurrentRPC": "JSON",
        "version": 395,
    }


def test_json_ext_numbers_become_strings_as_fastjson_maps_them() -> None:
    frame = java_json_frame('{"code":14,"extFields":{"queueId":3,"flag":true},"opaque":1,"unknownMember":[1]}')
    assert decode_frame(frame).ext_fields == {"queueId": "3", "flag": "true"}
    assert decode_frame(frame).extra == {"unknownMember": [1]}


def test_binary_request_decodes_byte_for_byte() -> None:
    header = java_binary_header(310, 1, 395, 42, FLAG_ONEWAY, b"", [(b"a", b"PG"), (b"b", b"TopicTest"), (b"e", b"3")])
    cmd = decode_frame(java_binary_frame(header, b"hello"))
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    assert cmd.language is LanguageCode.CPP
    assert (cmd.version, cmd.opaque) == (395, 42)
    assert cmd.is_oneway and not cmd.is_response
    assert cmd.remark is None
    assert cmd.ext_fields == {"a": "PG", "b": "TopicTest", "e": "3"}
    assert cmd.body == b"hello"
    assert cmd.serialize_type is SerializeType.ROCKETMQ


def test_binary_encode_matches_the_reference_layout() -> None:
    cmd = RemotingCommand(
        code=0,
        language=LanguageCode.JAVA,
        version=395,
        opaque=42,
        flag=FLAG_RESPONSE,
        remark="ok ✓",
        ext_fields={"msgId": "AB", "queueId": "1"},
        body=b"\x00\x01",
        serialize_type=SerializeType.ROCKETMQ,
    )
    header = java_binary_header(0, 0, 395, 42, FLAG_RESPONSE, "ok ✓".encode(), [(b"msgId", b"AB"), (b"queueId", b"1")])
    assert encode(cmd) == java_binary_frame(header, b"\x00\x01")
    assert decode_frame(encode(cmd)) == cmd


def test_stream_decoder_handles_split_and_coalesced_frames() -> None:
    a = java_json_frame(FASTJSON_ROUTE_REQ)
    b = java_binary_frame(java_binary_header(34, 1, 395, 9, 0, b"", []), b"{}")
    stream = a + b
    dec = RemotingDecoder()
    got = []
    for i in range(0, len(stream), 7):
        got += dec.feed(stream[i : i + 7])
    assert [c.opaque for c in got] == [7, 9]
    assert [c.serialize_type for c in got] == [SerializeType.JSON, SerializeType.ROCKETMQ]
    assert dec.buffered == 0


def test_sniff_tells_remoting_from_pymq_frames() -> None:
    native = encode_bytes(Command(code=105, opaque=1, flags=0, remark=None, ext={"topic": "T"}))
    assert sniff(native[:9]) == "pymq"
    assert sniff(java_json_frame(FASTJSON_ROUTE_REQ)[:9]) == "remoting"
    assert sniff(java_binary_frame(java_binary_header(34, 1, 0, 1, 0, b"", []))[:9]) == "remoting"
    assert sniff(b"\x00\x00\x00\x10\x00") is None
    assert sniff(java_binary_frame(java_binary_header(34, 1, 0, 1, 0, b"", []))[:5]) == "remoting"


# --- bad input: a RemotingFrameError naming the part at fault, never anything else ---------------


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        (java_json_frame("{not json"), "header"),
        (java_json_frame("[1,2]"), "header"),
        (java_json_frame('{"opaque":1}'), "code"),
        (java_json_frame('{"code":"ten","opaque":1}'), "code"),
        (java_json_frame('{"code":10,"opaque":1,"language":"COBOL"}'), "language"),
        (java_json_frame('{"code":10,"opaque":1,"extFields":[1]}'), "extFields"),
        (java_json_frame('{"code":10,"opaque":1,"extFields":{"k":[1]}}'), "extFields.k"),
        (java_json_frame('{"code":10,"opaque":1,"remark":5}'), "remark"),
        (struct.pack(">iI", 8, 100) + b"{}{}", "header_len"),
        (struct.pack(">iI", 6, (7 << 24) | 2) + b"{}", "serialize_type"),
        (java_binary_frame(b"\x00\x0a\x01"), "header"),
        (java_binary_frame(java_binary_header(10, 99, 0, 1, 0, b"", [])), "language"),
        (java_binary_frame(struct.pack(">hBhii", 10, 1, 0, 1, 0) + struct.pack(">i", 50)), "remark"),
        (
            java_binary_frame(struct.pack(">hBhii", 10, 1, 0, 1, 0) + struct.pack(">ii", 0, 30)),
            "extFields",
        ),
        (
            java_binary_frame(struct.pack(">hBhii", 10, 1, 0, 1, 0) + struct.pack(">ii", 0, 5) + b"\x00\x09abc"),
            "extFields key",
        ),
    ],
)
@pytest.mark.parametrize("fields", [False, True], ids=["commands", "fields"])
def test_broken_frames_name_the_field(frame: bytes, field: str, fields: bool) -> None:
    decoder = RemotingDecoder()
    with pytest.raises(RemotingFrameError) as err:
        decoder.feed_fields(frame) if fields else decoder.feed(frame)
    assert err.value.field == field
    assert field in str(err.value)


def test_length_below_the_header_word_and_above_the_limit_are_refused() -> None:
    with pytest.raises(RemotingFrameError, match="length"):
        RemotingDecoder().feed(struct.pack(">i", 2) + b"xx")
    with pytest.raises(RemotingFrameError, match="length"):
        RemotingDecoder().feed(struct.pack(">i", -5))
    with pytest.raises(FrameTooLargeError):
        RemotingDecoder(max_frame_size=1024).feed(struct.pack(">i", 4096))


_ODD_STRINGS = ["plain", "", "ü ✓ 中文", 'quote " back \\ slash', "ctl \x01\x02\n\t\x7f", "\u2028 line sep", "😀"]


def _frames_to_compare() -> list[bytes]:
    frames = []
    for stype in (SerializeType.JSON, SerializeType.ROCKETMQ):
        for s in _ODD_STRINGS:
            for ext in (None, {"k": s}, {s or "e": "v", "a": "1", "b": s}):
                for remark in (None, s):
                    cmd = RemotingCommand(
                        code=310,
                        opaque=-7,
                        flag=FLAG_ONEWAY,
                        version=413,
                        remark=remark,
                        ext_fields=ext,
                        body=b"body",
                        serialize_type=stype,
                        language=LanguageCode.CPP,
                    )
                    frames.append(encode(cmd))
    frames += [
        java_json_frame('{"code":10,"opaque":1,"extFields":{"n":5,"t":true,"x":null},"extra":{"y":1}}', b"b"),
        java_json_frame('{"code":10,"opaque":1,"flag":0,"language":"GO","serializeTypeCurrentRPC":"JSON"}'),
        java_json_frame('{"code":10,"opaque":1,"extFields":{}}'),
        java_binary_frame(java_binary_header(10, 1, 2, 3, 0, b"", [(b"k", b"\xc3\xbc")])),
        java_binary_frame(java_binary_header(10, 1, 2, 3, 0, "r\u00fc".encode(), [(b"k" * 200, b"v" * 300)])),
    ]
    return frames


@pytest.mark.parametrize("frame", _frames_to_compare())
def test_fields_are_what_the_commands_carry(frame: bytes) -> None:
    """feed_fields (the broker's fast path) gives each frame's fields exactly as feed's RemotingCommand."""
    (cmd,) = RemotingDecoder().feed(frame)
    (fields,) = RemotingDecoder().feed_fields(frame)
    assert fields == (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields,
                      cmd.body, cmd.serialize_type)  # fmt: skip


@pytest.mark.parametrize("s", _ODD_STRINGS)
def test_json_header_template_is_what_json_dumps_writes(s: str) -> None:
    for ext in (None, {}, {"b": s, "a": s, s or "e": "1"}, {"n": 5, "t": True}):  # type: ignore[dict-item]
        for remark in (None, s):
            cmd = RemotingCommand(code=17, opaque=3, flag=FLAG_RESPONSE, remark=remark, ext_fields=ext)  # type: ignore[arg-type]
            obj: dict = {"code": 17, "flag": FLAG_RESPONSE, "language": "JAVA", "opaque": 3,
                         "serializeTypeCurrentRPC": "JSON", "version": 0}  # fmt: skip
            if ext:
                obj["extFields"] = ext
            if remark is not None:
                obj["remark"] = remark
            dumped = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            assert encode_header(cmd) == dumped
