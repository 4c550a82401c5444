"""The columnar record decoder gives exactly what the row-by-row reference decoder gives (no JVM)."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymq.protocol.record import SYSFLAG_COMPRESSED, encode_record, pack_host
from pymq.protocol.record_columns import record_columns
from pymq.spark_connector import arrow
from pymq.spark_connector.arrow import records_to_batch, records_to_batch_by_rows

_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
_props = st.dictionaries(
    st.one_of(st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "a", "ü"]), _text.filter(bool)), _text, max_size=5
)


@st.composite
def _records(draw: st.DrawFn) -> bytes:
    out = []
    for i in range(draw(st.integers(1, 12))):
        body = draw(st.binary(min_size=0, max_size=40))
        compressed = draw(st.booleans())
        props = draw(_props)
        if "KEYS" in props and draw(st.booleans()):
            props["KEYS"] = " k1  k2 " + props["KEYS"]  # empty keys between spaces are dropped
        raw = "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()
        out.append(
            encode_record(
                draw(st.sampled_from([b"orders", "tópico".encode()])),
                zlib.compress(body) if compressed else body,
                raw,
                sys_flag=SYSFLAG_COMPRESSED if compressed else 0,
                queue_id=i % 4,
                queue_offset=100 + i,
                physical_offset=4096 * i,
                store_host=pack_host("127.0.0.1", 10911),
                born_timestamp=1000 + i,
                store_timestamp=2000 + i,
                reconsume_times=i % 3,
            )
        )
    return b"".join(out)


@settings(max_examples=150, deadline=None)
@given(_records(), st.sampled_from([None, frozenset({"x"}), frozenset({"", "y"})]))
def test_columnar_decoder_matches_the_row_decoder(chunk: bytes, tags: frozenset[str] | None) -> None:
    # Called directly: a silent fallback to the row decoder would make this comparison empty.
    columnar = arrow._columnar(chunk, record_columns(chunk), "broker-a", tags)
    reference = records_to_batch_by_rows([chunk], "broker-a", tags)
    assert columnar.equals(reference), (columnar.to_pylist(), reference.to_pylist())


def test_chunks_are_decoded_as_one_and_empty_input_gives_an_empty_batch() -> None:
    one = encode_record(b"t", b"body", b"UNIQ_KEY\x01U\x02TAGS\x01x\x02", queue_offset=1)
    two = encode_record(b"t", b"body2", b"", queue_offset=2, physical_offset=9)
    batch = records_to_batch([one, b"", two], "b")
    assert batch.equals(records_to_batch_by_rows([one, two], "b"))
    # Pull answers arrive as views of the frame buffer.
    assert records_to_batch([memoryview(one), memoryview(two)], "b").equals(batch)
    assert records_to_batch([memoryview(one + two)], "b").equals(batch)
    assert [r["queueOffset"] for r in batch.to_pylist()] == [1, 2] and batch.to_pylist()[1]["properties"] == []
    assert records_to_batch([], "b").num_rows == 0 and records_to_batch([b""], "b").schema == arrow.ARROW_SCHEMA


@pytest.mark.parametrize(
    "raw_props",
    [b"TAGS\x01\xff\xfe\x02", b"novalue\x02TAGS\x01x\x02"],
    ids=["not-utf8", "no-separator"],
)
def test_what_the_columnar_decoder_refuses_goes_through_the_row_decoder(raw_props: bytes) -> None:
    chunk = encode_record(b"t", b"b", raw_props) + encode_record(b"t", b"c", b"TAGS\x01x\x02")
    with pytest.raises((pa.ArrowInvalid, arrow._NotColumnar)):
        arrow._columnar(chunk, record_columns(chunk), "b", None)
    assert records_to_batch([chunk], "b").equals(records_to_batch_by_rows([chunk], "b"))
    assert records_to_batch([memoryview(chunk)], "b").equals(records_to_batch_by_rows([chunk], "b"))


def test_not_a_record_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a pymq record"):
        records_to_batch([b"\x00\x00\x00\x80" + b"garbage" * 30], "b")
