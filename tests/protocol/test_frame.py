"""The RPC frame codec: Command encoding and the incremental FrameDecoder."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymq.errors import FrameTooLargeError, LocalProtocolError, ProtocolError, RemoteProtocolError
from pymq.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    Command,
    FrameCodec,
    FrameDecoder,
    encode,
    encode_bytes,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
ext_values = st.one_of(ints, st.text(max_size=30), st.binary(max_size=30), st.booleans())
exts = st.dictionaries(st.text(max_size=12), ext_values, max_size=6)
buffers = st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=300).map(bytearray),
    st.binary(max_size=300).map(memoryview),
)
bodies = st.one_of(buffers, st.lists(buffers, max_size=5))


@st.composite
def commands(draw: st.DrawFn) -> Command:
    return Command(
        code=draw(ints),
        opaque=draw(st.integers(min_value=0, max_value=2**32 - 1)),
        flags=draw(st.integers(min_value=0, max_value=255)),
        remark=draw(st.none() | st.text(max_size=40)),
        ext=draw(exts),
        body=draw(bodies),
    )


def expected_body(body) -> bytes:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    return b"".join(bytes(p) for p in body)


def assert_same(got: Command, want: Command) -> None:
    assert (got.code, got.opaque, got.flags, got.remark) == (want.code, want.opaque, want.flags, want.remark)
    assert got.ext == want.ext
    assert bytes(got.body) == expected_body(want.body)


def frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


# --- properties ----------------------------------------------------------------------------------


@SETTINGS
@given(commands())
def test_round_trip(cmd: Command) -> None:
    """Any command decodes back to equal code, opaque, flags, remark, ext and body."""
    decoded = FrameDecoder().feed(encode_bytes(cmd))
    assert len(decoded) == 1
    assert_same(decoded[0], cmd)


@SETTINGS
@given(commands())
def test_encode_parts_join_to_encode_bytes(cmd: Command) -> None:
    """encode() returns buffers whose concatenation is encode_bytes() and whose prefix is consistent."""
    parts = encode(cmd)
    joined = b"".join(bytes(p) for p in parts)
    assert joined == encode_bytes(cmd)
    frame_len, header_len = struct.unpack_from(">II", joined)
    assert frame_len == len(joined) - 4
    assert header_len <= frame_len - 4
    assert all(len(p) for p in parts[1:]), "empty body parts are not written"


@SETTINGS
@given(st.lists(commands(), min_size=1, max_size=5), st.data())
def test_stream_split_anywhere(cmds: list[Command], data: st.DataObject) -> None:
    """Several frames fed in arbitrary chunks decode to the same commands in order."""
    stream = b"".join(encode_bytes(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    dec = FrameDecoder()
    out: list[Command] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    assert len(out) == len(cmds)
    for got, want in zip(out, cmds, strict=True):
        assert_same(got, want)
    assert dec.buffered == 0


@SETTINGS
@given(st.lists(commands(), min_size=1, max_size=4), st.data())
def test_truncated_valid_input_yields_fewer_frames(cmds: list[Command], data: st.DataObject) -> None:
    """A valid stream cut short yields exactly the complete frames and buffers the rest, no error."""
    frames = [encode_bytes(c) for c in cmds]
    stream = b"".join(frames)
    cut = data.draw(st.integers(0, len(stream)))
    dec = FrameDecoder()
    out = dec.feed(stream[:cut])
    complete, end = 0, 0
    for f in frames:
        if end + len(f) > cut:
            break
        end += len(f)
        complete += 1
    assert len(out) == complete
    for got, want in zip(out, cmds, strict=False):
        assert_same(got, want)
    assert dec.buffered == cut - end


@SETTINGS
@given(st.binary(max_size=400), st.data())
def test_garbage_only_raises_protocol_error(garbage: bytes, data: st.DataObject) -> None:
    """Arbitrary bytes in arbitrary chunks either decode or raise a ProtocolError, nothing else."""
    dec = FrameDecoder(max_frame_size=4096)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(garbage)), max_size=6)))
    prev = 0
    try:
        for cut in [*cuts, len(garbage)]:
            dec.feed(garbage[prev:cut])
            prev = cut
    except ProtocolError:
        pass


@SETTINGS
@given(st.binary(max_size=100), st.binary(max_size=50))
def test_random_header_bytes_only_raise_remote_protocol_error(header: bytes, body: bytes) -> None:
    """A well-framed frame with a random header decodes or raises RemoteProtocolError."""
    try:
        cmds = FrameDecoder().feed(frame(header, body))
    except RemoteProtocolError:
        return
    assert len(cmds) == 1 and bytes(cmds[0].body) == body


msgpack_objs = st.recursive(
    st.none() | st.booleans() | ints | st.text(max_size=8) | st.binary(max_size=8) | st.floats(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@SETTINGS
@given(msgpack_objs)
def test_wrong_header_shapes_raise_remote_protocol_error(obj) -> None:
    """A msgpack header of the wrong shape raises RemoteProtocolError; a valid shape decodes."""
    header = msgpack.packb(obj, use_bin_type=True)
    try:
        cmds = FrameDecoder().feed(frame(header))
    except RemoteProtocolError:
        return
    assert isinstance(obj, list) and len(obj) >= 5
    assert (cmds[0].code, cmds[0].opaque, cmds[0].flags) == tuple(obj[:3])


# --- examples ------------------------------------------------------------------------------------


def test_request_and_response_helpers() -> None:
    """Command.response echoes the opaque and sets the response flag; request has none."""
    req = Command.request(17, {"topic": "T"}, b"x")
    req.opaque = 42
    assert not req.is_response and not req.is_oneway
    resp = req.response(3, "nope", {"a": 1}, b"y")
    assert resp.opaque == 42 and resp.is_response and resp.code == 3 and resp.remark == "nope"
    assert Command(1, flags=FLAG_ONEWAY).is_oneway
    assert Command(1, flags=FLAG_RESPONSE | FLAG_ONEWAY).is_response


def test_body_bytes_joins_sequences() -> None:
    """body_bytes() returns bytes for bytes, bytearray, memoryview and list bodies."""
    assert Command(1, body=b"ab").body_bytes() == b"ab"
    assert Command(1, body=bytearray(b"ab")).body_bytes() == b"ab"
    assert Command(1, body=memoryview(b"ab")).body_bytes() == b"ab"
    assert Command(1, body=[b"a", bytearray(b"b"), memoryview(b"c")]).body_bytes() == b"abc"


def test_empty_body_and_empty_ext() -> None:
    """An empty body and empty ext decode to b'' and {}; remark None stays None."""
    (cmd,) = FrameDecoder().feed(encode_bytes(Command(5, 9)))
    assert bytes(cmd.body) == b"" and cmd.ext == {} and cmd.remark is None


def test_known_layout() -> None:
    """The prefix is frame_len then header_len, big-endian, followed by a msgpack header and raw body."""
    raw = encode_bytes(Command(10, 7, FLAG_RESPONSE, "r", {"k": 1}, b"BODY"))
    header = msgpack.packb([10, 7, FLAG_RESPONSE, "r", {"k": 1}], use_bin_type=True)
    assert raw == struct.pack(">II", 4 + len(header) + 4, len(header)) + header + b"BODY"


def test_body_is_zero_copy_view_and_stable() -> None:
    """Decoded bodies are memoryviews that stay valid after more input is fed."""
    a, b = encode_bytes(Command(1, body=b"first")), encode_bytes(Command(2, body=b"second"))
    dec = FrameDecoder()
    (c1,) = dec.feed(a + b[:5])
    assert isinstance(c1.body, memoryview)
    (c2,) = dec.feed(b[5:])
    assert bytes(c1.body) == b"first" and bytes(c2.body) == b"second"


def test_unencodable_header_raises_local_protocol_error() -> None:
    """An ext value msgpack cannot carry raises LocalProtocolError on encode."""
    with pytest.raises(LocalProtocolError):
        encode(Command(1, ext={"x": object()}))


def test_too_large_raises_on_prefix_alone() -> None:
    """A length above max_frame_size raises FrameTooLargeError from the 8-byte prefix, buffering nothing."""
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLargeError):
        dec.feed(struct.pack(">II", 1025, 0))
    assert dec.buffered == 0
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(struct.pack(">II", 0xFFFFFFFF, 0))


def test_length_at_maximum_is_accepted() -> None:
    """A length equal to max_frame_size waits for more bytes instead of failing."""
    dec = FrameDecoder(max_frame_size=1024)
    assert dec.feed(struct.pack(">II", 1024, 0)) == []
    assert dec.buffered == 8
    assert DEFAULT_MAX_FRAME_SIZE > 16 * 1024 * 1024


def test_too_large_after_valid_frames_in_same_chunk() -> None:
    """A too-large prefix following a valid frame in one chunk still raises FrameTooLargeError."""
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLargeError):
        dec.feed(encode_bytes(Command(1)) + struct.pack(">II", 5000, 0))


@pytest.mark.parametrize(
    "prefix",
    [struct.pack(">II", 3, 0), struct.pack(">II", 10, 7), struct.pack(">II", 0, 0)],
    ids=["frame-below-4", "header-beyond-frame", "zero"],
)
def test_bad_lengths_raise(prefix: bytes) -> None:
    """Inconsistent frame/header lengths raise RemoteProtocolError."""
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(prefix)


def test_decoder_refuses_input_after_error() -> None:
    """After a ProtocolError every later feed raises, even with valid input."""
    dec = FrameDecoder(max_frame_size=64)
    with pytest.raises(FrameTooLargeError):
        dec.feed(struct.pack(">II", 65, 0))
    with pytest.raises(RemoteProtocolError):
        dec.feed(encode_bytes(Command(1)))
    bad = FrameDecoder()
    with pytest.raises(RemoteProtocolError):
        bad.feed(frame(b"\xc1"))  # 0xc1 is never valid msgpack
    with pytest.raises(RemoteProtocolError):
        bad.feed(b"")


def test_byte_by_byte_feeding() -> None:
    """Feeding one byte at a time produces each command exactly once."""
    cmds = [Command(i, i, 0, f"r{i}", {"i": i}, bytes([i]) * i) for i in range(1, 5)]
    stream = b"".join(encode_bytes(c) for c in cmds)
    dec = FrameDecoder()
    out: list[Command] = []
    for i in range(len(stream)):
        out += dec.feed(stream[i : i + 1])
    assert [c.code for c in out] == [1, 2, 3, 4]
    assert [bytes(c.body) for c in out] == [bytes([i]) * i for i in range(1, 5)]


@SETTINGS
@given(commands())
def test_the_codec_encodes_what_encode_does(cmd: Command) -> None:
    """FrameCodec.encode (its own packer, one-buffer bodies inline) gives encode()'s bytes and parts."""
    codec = FrameCodec()
    parts = codec.encode(cmd)
    assert b"".join(bytes(p) for p in parts) == encode_bytes(cmd)
    assert len(parts) == len(encode(cmd)) and all(len(p) for p in parts[1:])


def test_the_codec_survives_an_unencodable_header() -> None:
    codec = FrameCodec()
    with pytest.raises(LocalProtocolError):
        codec.encode(Command(1, ext={"x": object()}))
    with pytest.raises(LocalProtocolError):
        codec.encode(Command(1, ext={"x": 2**70}))
    ok = Command(2, 7, ext={"a": 1}, body=[b"x", b"", b"yz"])
    assert b"".join(bytes(p) for p in codec.encode(ok)) == encode_bytes(ok)
