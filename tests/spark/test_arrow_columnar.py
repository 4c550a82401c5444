"""The columnar record decoder gives exactly what the row-by-row reference decoder gives (no JVM)."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymq.protocol.record import SYSFLAG_COMPRESSED, encode_record, pack_host
from pymq.protocol.record_columns import StringColumns, record_string_columns
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


def _columnar(chunk: bytes, broker: str, tags: frozenset[str] | None) -> pa.RecordBatch:
    """The columnar decoder called directly: a silent fallback to the row decoder would make a
    comparison with it empty. Its arrays, built around buffers, must be valid ones."""
    cols, strings = record_string_columns(chunk)
    assert isinstance(strings, StringColumns)
    batch = arrow._columnar(cols, strings, broker, tags)
    batch.validate(full=True)
    return batch


@settings(max_examples=150, deadline=None)
@given(_records(), st.sampled_from([None, frozenset({"x"}), frozenset({"", "y"})]))
def test_columnar_decoder_matches_the_row_decoder(chunk: bytes, tags: frozenset[str] | None) -> None:
    columnar = _columnar(chunk, "broker-a", tags)
    reference = records_to_batch_by_rows([chunk], "broker-a", tags)
    assert columnar.equals(reference), (columnar.to_pylist(), reference.to_pylist())


_item = st.one_of(
    st.tuples(st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "a", ""]), _text).map("\x01".join),
    st.sampled_from(["", "TAGS", "KEYS", " k  k2 "]),  # empty items and items without a separator
    _text,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_item, max_size=8), min_size=1, max_size=6), st.sampled_from([None, frozenset({"x", ""})]))
def test_odd_properties_decode_as_the_row_decoder_reads_them(
    records: list[list[str]], tags: frozenset[str] | None
) -> None:
    """Repeated names (the last TAGS and UNIQ_KEY count, every KEYS), empty and bare items."""
    chunk = b"".join(
        encode_record(b"t", b"b", "\x02".join(items).encode(), physical_offset=i, store_host=pack_host("10.0.0.1", 1))
        for i, items in enumerate(records)
    )
    columnar = _columnar(chunk, "b", tags)
    reference = records_to_batch_by_rows([chunk], "b", tags)
    assert columnar.equals(reference), (columnar.to_pylist(), reference.to_pylist())
    assert records_to_batch([chunk], "b", tags).equals(reference)


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
    ("topic", "raw_props"),
    [(b"t", b"TAGS\x01\xff\xfe\x02"), (b"t", b"a\x01\xed\xa0\x80"), ("tópicó".encode()[:-1], b"")],
    ids=["not-utf8", "surrogate", "cut-topic"],
)
def test_what_the_columnar_decoder_refuses_goes_through_the_row_decoder(topic: bytes, raw_props: bytes) -> None:
    chunk = encode_record(topic, b"b", raw_props) + encode_record(b"t", b"c", b"TAGS\x01x\x02")
    assert record_string_columns(chunk)[1] is None
    if topic == b"t":
        assert records_to_batch([chunk], "b").equals(records_to_batch_by_rows([chunk], "b"))
        assert records_to_batch([memoryview(chunk)], "b").equals(records_to_batch_by_rows([chunk], "b"))
    else:  # the row decoder does not replace a topic's bad bytes
        with pytest.raises(UnicodeDecodeError):
            records_to_batch([chunk], "b")


def test_not_a_record_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a pymq record"):
        records_to_batch([b"\x00\x00\x00\x80" + b"garbage" * 30], "b")
