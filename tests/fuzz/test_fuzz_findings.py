"""Regression tests for what the atheris fuzzers (fuzz/) found: each replays the input that found it.

The inputs are the crash/timeout files libFuzzer wrote, base64 here; the target that found
each is named (fuzz/targets.py), and ``python fuzz/fuzz_one.py TARGET FILE`` replays one.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

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
