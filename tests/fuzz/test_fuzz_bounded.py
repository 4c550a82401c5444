"""Fuzzing, short run: what a hostile peer controls is parsed or refused with the documented error.

* the frame decoder (any bytes, cut anywhere) yields commands or raises ProtocolError;
* the record scanners (``parse_record``, ``unpack_record``/``iter_records``, ``split_batch``,
  ``StoredScan``, ``count_records``, ``iter_spans``, ``records_before``,
  ``stored_record_size``, ``decode_properties``) take garbage and mutated records and either
  parse them or raise MessageDecodeError, never reading outside what they were given;
* every typed header's ``from_ext`` takes any ext map (missing, extra and ill-typed fields,
  huge and fractional numbers) and returns a well-typed header with in-range integers or
  raises InvalidRequestError.

Each property runs a few hundred inputs here; ``HYPOTHESIS_PROFILE=fuzz`` runs many more. Where
a property has two sides (parsed, or refused with the documented error), its test also checks
that the inputs reached both: a parser that refused everything would otherwise pass unchecked.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymq.errors import InvalidRequestError, MessageDecodeError, ProtocolError
from pymq.protocol import requests as rq
from pymq.protocol.frame import Command, FrameDecoder, encode_bytes
from pymq.protocol.record import (
    MIN_RECORD_SIZE,
    decode_properties,
    encode_properties,
    encode_record,
    iter_records,
    iter_spans,
    parse_record,
    records_before,
    stored_record_size,
    topic_field,
    unpack_record,
)
from pymq.protocol.record_batch import StoredScan, count_records, split_batch

settings.register_profile(
    "short", max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "fuzz", max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
SETTINGS = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "short"))

HEADERS = [c for c in vars(rq).values() if isinstance(c, type) and issubclass(c, rq.Header) and c is not rq.Header]

#: how a property's inputs ended, by outcome (filled while :func:`run_reaching_both` runs it)
OUTCOMES: Counter[str] = Counter()


def run_reaching_both(prop: Callable[[], None], accepted: str, refused: str) -> None:
    """Run the hypothesis property ``prop``; some of its inputs must have ended each way."""
    OUTCOMES.clear()
    prop()
    assert OUTCOMES[accepted] > 0 and OUTCOMES[refused] > 0, dict(OUTCOMES)


# --- inputs ------------------------------------------------------------------------------------------


def header_values(ints: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    """What an ext map's values may be: every msgpack type, numbers far out of any field's range."""
    return st.one_of(
        st.none(),
        st.booleans(),
        ints,
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.from_regex(r"[+-]?[0-9]{1,25}", fullmatch=True),
        st.binary(max_size=20),
        st.lists(ints, max_size=4),
        st.dictionaries(st.text(max_size=4), ints, max_size=2),
    )


#: what msgpack can carry (int64 .. uint64)
values = header_values(st.integers(-(2**63), 2**64 - 1))
#: what another codec could hand over (any Python int)
any_values = header_values(st.integers(-(2**80), 2**80))


def mutated(data: st.DataObject, buf: bytes, *, max_flips: int = 6) -> bytes:
    """``buf`` with a few bytes changed, cut short or extended."""
    out = bytearray(buf)
    for _ in range(data.draw(st.integers(0, max_flips))):
        if out:
            out[data.draw(st.integers(0, len(out) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(out)))
    return bytes(out[:cut]) + data.draw(st.binary(max_size=40)) if data.draw(st.booleans()) else bytes(out)


def some_record(data: st.DataObject) -> bytes:
    props = data.draw(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY"]), st.text("ab1 ")))
    return encode_record(b"T", data.draw(st.binary(max_size=60)), encode_properties(props))


# --- frames ------------------------------------------------------------------------------------------


def feed_all(decoder: FrameDecoder, data: bytes, cuts: list[int]) -> list[Command]:
    out: list[Command] = []
    pos = 0
    for size in [*cuts, len(data)]:
        out += decoder.feed(data[pos : pos + size])
        pos += size
        if pos >= len(data):
            break
    return out


@SETTINGS
@given(st.binary(max_size=3000), st.lists(st.integers(1, 200), max_size=20))
def test_frame_decoder_takes_any_bytes(data: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(max_frame_size=64 * 1024)
    try:
        commands = feed_all(decoder, data, cuts)
    except ProtocolError:
        return
    for cmd in commands:
        assert isinstance(cmd.code, int) and isinstance(cmd.ext, dict)
    assert decoder.buffered <= len(data)


@SETTINGS
@given(st.data(), st.lists(st.integers(1, 64), max_size=20))
def frames_mutated(data: st.DataObject, cuts: list[int]) -> None:
    ext = data.draw(st.dictionaries(st.text(max_size=8), values, max_size=5))
    frames = b"".join(encode_bytes(Command.request(data.draw(st.integers(0, 400)), ext, b"body")) for _ in range(2))
    decoder = FrameDecoder(max_frame_size=64 * 1024)
    try:
        commands = feed_all(decoder, mutated(data, frames), cuts)
    except ProtocolError:
        OUTCOMES["refused"] += 1
        return
    for cmd in commands:
        assert isinstance(cmd.code, int) and isinstance(cmd.ext, dict)
        OUTCOMES["decoded"] += 1


def test_frame_decoder_takes_mutated_frames() -> None:
    run_reaching_both(frames_mutated, "decoded", "refused")


@SETTINGS
@given(st.recursive(values, lambda inner: st.lists(inner, max_size=6), max_leaves=12))
def test_frame_decoder_takes_any_msgpack_header(header: Any) -> None:
    raw = msgpack.packb(header, use_bin_type=True)
    frame = (4 + len(raw)).to_bytes(4, "big") + len(raw).to_bytes(4, "big") + raw
    try:
        FrameDecoder().feed(frame)
    except ProtocolError:
        pass


# --- records -----------------------------------------------------------------------------------------


def scan_everything(buf: bytes) -> None:
    """Every record reader over ``buf``: only MessageDecodeError may come out."""
    for check_crc in (False, True):
        try:
            r = parse_record(buf, check_crc=check_crc)
            assert MIN_RECORD_SIZE <= r.total_size <= len(buf)
            OUTCOMES["parsed"] += check_crc
        except MessageDecodeError:
            OUTCOMES["refused"] += check_crc
    try:
        fields = unpack_record(buf)
        assert fields[16] <= len(buf)
    except MessageDecodeError:
        pass
    try:
        for fields in iter_records(buf):
            assert fields[16] <= len(buf)
    except MessageDecodeError:
        pass
    for pos, size in iter_spans(buf):
        assert pos >= 0 and size >= MIN_RECORD_SIZE
    assert len(records_before(buf, 5)) <= len(buf)
    assert count_records(buf) >= 1
    assert 0 <= stored_record_size(buf, 0, len(buf), 0) <= len(buf)
    positions, sizes, props_ats, _rejected = split_batch(buf, topic_field(b"T"), 4096)
    for pos, size, props_at in zip(positions, sizes, props_ats, strict=True):
        assert 0 <= pos < props_at <= pos + size <= len(buf)
        parse_record(buf, pos, check_crc=True)  # what split_batch accepts is a whole, valid record
    scan = StoredScan(buf, 0, len(buf), 0, True)
    for pos, size, topic_at, props_at, *_ in scan:
        assert 0 <= pos < topic_at <= props_at <= pos + size <= len(buf)
    assert 0 <= scan.pos <= len(buf) and scan.blank_size() >= 0
    assert isinstance(decode_properties(buf), dict)


@SETTINGS
@given(st.binary(max_size=600))
def test_record_scanners_take_any_bytes(buf: bytes) -> None:
    scan_everything(buf)


@SETTINGS
@given(st.data())
def records_mutated(data: st.DataObject) -> None:
    batch = b"".join(some_record(data) for _ in range(data.draw(st.integers(1, 3))))
    scan_everything(mutated(data, batch))


def test_record_scanners_take_mutated_records() -> None:
    run_reaching_both(records_mutated, "parsed", "refused")


# --- typed headers -----------------------------------------------------------------------------------


@SETTINGS
@given(st.sampled_from(HEADERS), st.data())
def headers_from_any_ext(cls: type[rq.Header], data: st.DataObject) -> None:
    names = list(cls.WIRE.values())
    ext: dict[Any, Any] = data.draw(st.dictionaries(st.sampled_from(names), any_values, max_size=len(names)))
    ext.update(data.draw(st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), any_values, max_size=2)))
    try:
        header = cls.from_ext(ext)
    except InvalidRequestError as exc:
        assert exc.remark  # names what is wrong
        OUTCOMES["refused"] += 1
        return
    OUTCOMES["accepted"] += 1
    for f in dataclasses.fields(header):  # type: ignore[arg-type]
        value = getattr(header, f.name)
        kind = str(f.type).replace(" ", "")
        if value is None:
            assert kind.endswith("|None") or f.default is None
        elif kind.startswith("int"):
            assert type(value) is int and -(2**63) <= value < 2**63
            lo, hi = f.metadata.get("range", (-(2**63), 2**63 - 1))
            assert lo <= value <= hi
        elif kind.startswith("str"):
            assert isinstance(value, str)
        elif kind.startswith("bool"):
            assert isinstance(value, bool)
        elif kind.startswith("list"):
            assert isinstance(value, list)


def test_every_header_takes_any_ext() -> None:
    run_reaching_both(headers_from_any_ext, "accepted", "refused")
