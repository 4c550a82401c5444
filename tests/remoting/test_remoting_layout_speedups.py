"""The accelerator's MessageDecoder conversion (``_speedups.stored_to_message_decoder``) against its
pure-Python reference (``message_layout.from_stored_records_py``): same bytes, same errors, on
generated records (test_remoting_message_layout mutates bytes at random; this generates the fields)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymq.protocol import record
from pymq.protocol.record import blank_marker, encode_properties, encode_record, pack_host
from pymq.remoting.message_layout import decode_messages, encode_message, from_stored_records, from_stored_records_py

try:
    from pymq import _speedups
except ImportError:  # no compiler at install: only the pure-Python half runs
    _speedups = None  # type: ignore[assignment]

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def stored(topic: bytes, body: bytes, props: dict[str, str], i: int) -> bytes:
    return encode_record(
        topic,
        body,
        encode_properties(props),
        flag=i * 3 - 1,
        sys_flag=i & 0xF,
        born_timestamp=1_700_000_000_000 + i,
        born_host=pack_host("10.0.0.1", 50000 + i),
        reconsume_times=i % 17,
        prepared_tx_offset=-i,
        queue_id=i % 5,
        queue_offset=i * 7,
        physical_offset=(1 << 40) + i,
        store_timestamp=1_700_000_000_500 + i,
        store_host=pack_host("127.0.0.1", 10911),
    )


#: property values: any text but the separators (and lone surrogates, which do not encode)
values = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=40)
records = st.lists(
    st.tuples(
        st.text("abcXYZ%_-09", min_size=1, max_size=127).map(str.encode),
        st.binary(max_size=3000),
        st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "color", "é"]), values, max_size=5),
    ),
    max_size=8,
)


@SETTINGS
@given(items=records, tail=st.sampled_from([b"", b"\x00" * 5, "blank"]))
def test_same_bytes_as_the_python_body(items: list[tuple[bytes, bytes, dict[str, str]]], tail: Any) -> None:
    buf = b"".join(stored(t, b, p, i) for i, (t, b, p) in enumerate(items))
    buf += blank_marker(64) + b"junk after the marker" if tail == "blank" else tail
    reference = from_stored_records_py(buf)
    assert outcome(from_stored_records, buf) == ("ok", reference)
    assert from_stored_records(memoryview(bytearray(buf))) == reference
    if record.speedups is not None:
        assert record.speedups.stored_to_message_decoder(buf) == reference
    assert reference == b"".join(map(encode_message, decode_messages(reference)))  # MessageDecoder's own bytes


def _hostile() -> list[bytes]:
    good = stored(b"T", b"body", {"TAGS": "a"}, 1)
    cases = [
        good[:-1],  # truncated
        good[:50],
        good + good[:40],  # a good record, then half of one
        struct.pack(">i", 10) + good[4:],  # size below the minimum
        struct.pack(">i", len(good) + 100) + good[4:],  # size past the buffer
        good[:4] + b"\x00\x00\x00\x00" + good[8:],  # bad magic
        good[:84] + struct.pack(">i", 10_000) + good[88:],  # body length past the record
        good[:84] + struct.pack(">i", -1) + good[88:],
        stored(b"T" * 128, b"x", {}, 2),  # a topic RocketMQ cannot carry
        stored(b"T" * 127, b"x", {}, 2),  # the longest it can
        good + os.urandom(3),
    ]
    topic_len_at = 88 + 4  # body b"body", then the u16 topic length
    cases.append(good[:topic_len_at] + struct.pack(">H", 500) + good[topic_len_at + 2 :])
    return cases


def test_hostile_buffers_raise_what_the_python_body_raises() -> None:
    for i, buf in enumerate(_hostile()):
        assert outcome(from_stored_records, buf) == outcome(from_stored_records_py, buf), i
        if _speedups is not None:
            fast = _speedups.stored_to_message_decoder(buf)
            py = outcome(from_stored_records_py, buf)
            assert fast is NotImplemented if py[0] != "ok" else fast == py[1], i


def test_odd_buffer_types_are_handed_back() -> None:
    if _speedups is None:
        assert from_stored_records(b"") == b""
        return
    assert _speedups.stored_to_message_decoder("not bytes") is NotImplemented  # type: ignore[arg-type]
    assert _speedups.stored_to_message_decoder(b"") == b""
