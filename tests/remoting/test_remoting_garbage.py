"""The remoting decoders never fail with anything but their own errors, whatever the bytes."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from pymq.errors import RemoteProtocolError
from pymq.remoting.codes import LanguageCode, SerializeType
from pymq.remoting.command import RemotingCommand, RemotingDecoder, decode_frame, encode
from pymq.remoting.message_layout import decode_messages


def _frame(stype: int, header: bytes, body: bytes) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 3), st.binary(max_size=200), st.binary(max_size=20))
def test_any_header_bytes_decode_or_raise_a_protocol_error(stype: int, header: bytes, body: bytes) -> None:
    try:
        cmd = decode_frame(_frame(stype, header, body))
    except RemoteProtocolError:
        return
    assert cmd.body == body and stype in (SerializeType.JSON, SerializeType.ROCKETMQ)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_any_stream_feeds_or_raises_a_protocol_error(data: bytes) -> None:
    dec = RemotingDecoder(max_frame_size=4096)
    try:
        dec.feed(data)
    except RemoteProtocolError:
        return
    assert dec.buffered <= len(data)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(-(1 << 15), (1 << 15) - 1),
    st.sampled_from(list(LanguageCode)),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    st.one_of(st.none(), st.dictionaries(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8), min_size=1)),
    st.binary(max_size=20),
    st.sampled_from(list(SerializeType)),
)
def test_encode_decode_round_trip(
    code: int,
    lang: LanguageCode,
    opaque: int,
    remark: str | None,
    ext: dict[str, str] | None,
    body: bytes,
    stype: SerializeType,
) -> None:
    cmd = RemotingCommand(
        code=code, language=lang, opaque=opaque, remark=remark, ext_fields=ext, body=body, serialize_type=stype
    )
    assert decode_frame(encode(cmd)) == cmd


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_any_pull_body_decodes_or_raises_a_protocol_error(data: bytes) -> None:
    try:
        decode_messages(data)
    except RemoteProtocolError:
        pass
