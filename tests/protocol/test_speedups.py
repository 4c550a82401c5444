"""The C accelerator (pymq._speedups) against the pure-Python record code: same bytes, same errors.

Every accelerated function keeps its Python body (``*_py``) as the reference; these tests feed
both the same inputs, well-formed and hostile (truncated, bad lengths, bad magic, bad CRC,
huge sizes, wrong topics), and compare results and exceptions. The other record tests run
with and without the accelerator (their ``impl`` fixture).
"""

from __future__ import annotations

import itertools
import mmap
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymq.protocol import record, record_batch
from pymq.protocol.record import encode_properties, encode_record, pack_host, topic_field
from pymq.protocol.record_columns import (
    RecordColumns,
    StringColumns,
    record_columns,
    record_columns_py,
    record_string_columns,
    record_string_columns_py,
)

try:
    from pymq import _speedups
except ImportError:  # no compiler at install: only the pure-Python half can run here
    _speedups = None  # type: ignore[assignment]

HOST = pack_host("10.0.0.1", 10911)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """A call's result, or its exception's type and message, for comparing two implementations."""
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return "error", (type(exc), str(exc))


def test_the_accelerator_is_built_where_a_compiler_is() -> None:
    """``pip install -e .`` compiles it on a machine with a C compiler (as every CI machine has).

    Without one, the functions below compare the Python bodies with themselves (they still run).
    """
    if shutil.which("cc") or shutil.which("gcc"):
        assert _speedups is not None
        assert os.environ.get("PYMQ_NO_SPEEDUPS") or record.speedups is _speedups


def test_the_accelerator_was_built_for_this_record_layout() -> None:
    assert _speedups is None or record.speedups_layout() == _speedups.LAYOUT


def test_the_switch_forces_the_fallback() -> None:
    code = "from pymq.protocol import record; print(record.speedups is None)"
    env = {**os.environ, "PYMQ_NO_SPEEDUPS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert out.stdout.strip() == "True"


def test_a_stale_build_is_refused_loudly() -> None:
    """A build for another layout or version (a .so left from before a pull) stops the import, naming the fix."""
    code = (
        "import sys, types\n"
        "stale = types.ModuleType('pymq._speedups')\n"
        "stale.LAYOUT = {'ABI_VERSION': 0}\n"
        "sys.modules['pymq._speedups'] = stale\n"
        "try:\n"
        "    import pymq.protocol.record\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYMQ_NO_SPEEDUPS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert "rebuild it (pip install -e .)" in out.stdout


# --- inputs ----------------------------------------------------------------------------------------------


@st.composite
def records(draw: st.DrawFn, topic: bytes = b"T") -> bytes:
    props = draw(
        st.sampled_from(
            [
                b"",
                encode_properties({"UNIQ_KEY": "ABC", "TAGS": "a"}),
                encode_properties({"DELAY": "3", "KEYS": "k1 k2"}),
                None,  # beyond MAX_PROPERTIES_SIZE
            ]
        )
    )
    body = draw(st.binary(max_size=64))
    rec_topic = draw(st.sampled_from([topic, topic, b"Other"]))
    if props is None:
        return oversize_record(rec_topic, body)
    return encode_record(
        rec_topic,
        body,
        props,
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        born_timestamp=draw(st.integers(0, 2**62)),
        born_host=HOST,
        queue_id=draw(st.integers(0, 7)),
        queue_offset=draw(st.integers(0, 2**40)),
        physical_offset=draw(st.integers(0, 2**40)),
        store_timestamp=draw(st.integers(0, 2**42)),
        store_host=HOST,
    )


def oversize_record(topic: bytes, body: bytes) -> bytes:
    """A record whose properties exceed MAX_PROPERTIES_SIZE (encode_record refuses to make one)."""
    rec = bytearray(encode_record(topic, body, b"")[:-2] + struct.pack(">H", 32800) + b"X" * 32800)
    struct.pack_into(">i", rec, 0, len(rec))
    return bytes(rec)


#: header fields worth breaking: size, magic, crc, body_len (and a byte of the body or lengths)
_FIELDS = [(0, ">i"), (4, ">I"), (8, ">I"), (84, ">i")]
_HOSTILE_INTS = [0, 1, -1, 91, 92, 93, 2**31 - 1, -(2**31), 0x706D7131, 0xCBD43194]


@st.composite
def hostile_buffers(draw: st.DrawFn) -> bytes:
    """Concatenated records, then a few of: a field set to a hostile value, a flipped byte, a cut, junk."""
    recs = draw(st.lists(records(), min_size=0, max_size=5))
    buf = bytearray(b"".join(recs))
    starts = [sum(len(r) for r in recs[:i]) for i in range(len(recs))]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["field", "flip", "cut", "junk", "blank"]))
        if kind == "field" and starts:
            at = draw(st.sampled_from(starts))
            off, fmt = draw(st.sampled_from(_FIELDS))
            value = draw(st.sampled_from(_HOSTILE_INTS))
            if fmt == ">I":
                value &= 0xFFFFFFFF
            elif value > 2**31 - 1:
                value -= 2**32
            if at + off + 4 <= len(buf):  # not cut away
                struct.pack_into(fmt, buf, at + off, value)
        elif kind == "flip" and buf:
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= draw(st.integers(1, 255))
        elif kind == "cut" and buf:
            del buf[draw(st.integers(0, len(buf) - 1)) :]
        elif kind == "junk":
            buf += draw(st.binary(max_size=100))
        elif kind == "blank":
            buf += struct.pack(">iI", 64, 0xCBD43194) + bytes(draw(st.integers(0, 60)))
    return bytes(buf)


# --- the CRC ----------------------------------------------------------------------------------------------


@SETTINGS
@given(data=st.binary(max_size=3000), start=st.integers(0, 2**32 - 1))
def test_crc32_is_zlibs(data: bytes, start: int) -> None:
    """Both of the extension's CRCs (zlib's if found at build, its own table) are zlib.crc32."""
    if _speedups is not None:
        assert _speedups.crc32(data, start) == zlib.crc32(data, start)
        assert _speedups.crc32_table(data, start) == zlib.crc32(data, start)


def test_crc32_folding_edges() -> None:
    """Every length around the folded (PCLMULQDQ) path's 64- and 16-byte steps, at unaligned starts.

    The folding runs where the CPU has PCLMULQDQ (``HAVE_CLMUL``), on the whole 16-byte blocks of
    inputs of 64 bytes and more; the tail goes to zlib or the table.
    """
    if _speedups is None:
        return
    data = memoryview(os.urandom(70_000))
    for n in [*range(0, 300), 1023, 1024, 1025, 65536, 65536 + 15, 69_990]:
        for skew in (0, 1, 7):
            chunk = data[skew : skew + n]
            for start in (0, 0xFFFFFFFF, 0x12345678):
                assert _speedups.crc32(chunk, start) == zlib.crc32(chunk, start), (n, skew, start)


# --- the batch path -------------------------------------------------------------------------------------


@SETTINGS
@given(data=hostile_buffers(), max_size=st.sampled_from([92, 200, 4 << 20]))
def test_split_batch_agrees(data: bytes, max_size: int) -> None:
    tf = topic_field(b"T")
    assert outcome(record_batch.split_batch, data, tf, max_size) == outcome(
        record_batch.split_batch_py, data, tf, max_size
    )


def test_split_batch_agrees_on_the_refusals() -> None:
    tf = topic_field(b"T")
    good = encode_record(b"T", b"body", b"TAGS\x01a\x02")
    bad_crc = bytearray(good)
    bad_crc[90] ^= 1
    huge = struct.pack(">i", 2**31 - 1) + good[4:]
    for data in [
        good + bytes(bad_crc) + good,
        good + encode_record(b"Other", b"x", b"") + good,
        good + oversize_record(b"T", b"x") + good,
        good + good[:50],
        good + huge,
        good * 3,
        b"",
    ]:
        for max_size in (100, 4 << 20):
            c = record_batch.split_batch(data, tf, max_size)
            assert c == record_batch.split_batch_py(data, tf, max_size)
            assert type(c) is record_batch.SplitBatch
    # arguments outside the C loop's domain go to the Python body
    assert outcome(record_batch.split_batch, memoryview(good), tf, 4 << 20) == outcome(
        record_batch.split_batch_py, memoryview(good), tf, 4 << 20
    )


@SETTINGS
@given(data=hostile_buffers(), needle=st.sampled_from([b"DELAY\x01", b"TAGS\x01", b"", b"\x02", b"zz"]))
def test_any_property_contains_agrees(data: bytes, needle: bytes) -> None:
    split = record_batch.split_batch_py(data, topic_field(b"T"), 4 << 20)
    assert record_batch.any_property_contains(data, split, needle) == record_batch.any_property_contains_py(
        data, split, needle
    )


@pytest.mark.parametrize(
    "split",
    [
        record_batch.SplitBatch([0], [10], [-5], []),
        record_batch.SplitBatch([0, 5], [1000, 3], [2, 100], []),
        record_batch.SplitBatch([0], [2**70], [0], []),
        record_batch.SplitBatch([0, 1], [10], [0], []),
    ],
)
def test_any_property_contains_agrees_on_odd_splits(split: record_batch.SplitBatch) -> None:
    data = b"abcDELAY\x01xyz" * 3
    assert outcome(record_batch.any_property_contains, data, split, b"DELAY\x01") == outcome(
        record_batch.any_property_contains_py, data, split, b"DELAY\x01"
    )


@SETTINGS
@given(
    positions=st.lists(st.integers(-300, 400), max_size=6),
    queue_id=st.sampled_from([0, 7, 2**31 - 1, 2**31, -(2**31) - 1]),
    first=st.sampled_from([0, 5, 2**63 - 3, 2**63]),
    base=st.sampled_from([0, 1 << 30, -10, 2**63 - 100]),
    host=st.sampled_from([HOST, b"short", HOST + b"x"]),
)
def test_patch_broker_blocks_agrees(positions: list[int], queue_id: int, first: int, base: int, host: bytes) -> None:
    start = os.urandom(512)
    results = []
    for patch in (record_batch.patch_broker_blocks, record_batch.patch_broker_blocks_py):
        buf = bytearray(start)
        results.append((outcome(patch, buf, positions, queue_id, first, base, 1234567, host), bytes(buf)))
    # identical bytes written and identical errors (the C function hands odd arguments to the Python body)
    assert results[0] == results[1]


def test_patch_broker_blocks_writes_a_mapped_file_as_the_python_code_does() -> None:
    recs = [encode_record(b"T", bytes([i]) * 30, b"") for i in range(5)]
    data = b"".join(recs)
    positions = [sum(len(r) for r in recs[:i]) for i in range(5)]
    out = []
    for patch in (record_batch.patch_broker_blocks, record_batch.patch_broker_blocks_py):
        mm = mmap.mmap(-1, 4096)
        mm[: len(data)] = data
        patch(mm, positions, 3, 100, 1 << 30, 1_700_000_000_000, HOST)
        out.append(bytes(mm))
        mm.close()
    assert out[0] == out[1]
    assert [record.unpack_record(out[0], p)[9] for p in positions] == [100, 101, 102, 103, 104]


@SETTINGS
@given(
    at=st.sampled_from([0, 1, 100, 300, 400, 512, -1]),
    data=st.one_of(st.binary(max_size=300), st.binary(max_size=120).map(bytearray)),
    pos=st.integers(-5, 320),
    size=st.integers(-5, 320),
    queue_id=st.sampled_from([0, 7, 2**31 - 1, 2**31, -(2**31) - 1]),
    qoff=st.sampled_from([0, 5, 2**63 - 1, 2**63]),
    base=st.sampled_from([0, 1 << 30, -10, 2**63 - 100]),
    host=st.sampled_from([HOST, b"short", HOST + b"x"]),
)
def test_store_record_agrees(
    at: int, data: bytes, pos: int, size: int, queue_id: int, qoff: int, base: int, host: bytes
) -> None:
    """One record copied then patched (a single send): the C entry point writes what the Python body writes."""
    start = os.urandom(512)
    results = []
    for store in (record_batch.store_record, record_batch.store_record_py):
        buf = bytearray(start)
        results.append((outcome(store, buf, at, data, pos, size, queue_id, qoff, base, 1234567, host), bytes(buf)))
    assert results[0] == results[1]


def test_store_record_writes_a_mapped_file_as_the_python_code_does() -> None:
    """Well-formed arguments (what CommitLog.append_one passes) are the C function's own, not handed back."""
    recs = [encode_record(b"T", bytes([i]) * 30, b"KEYS\x01a\x02") for i in range(3)]
    batch = b"".join(recs)
    start = os.urandom(4096)
    out = []
    for store in (_speedups.store_record if _speedups else None, record_batch.store_record_py):
        mm = mmap.mmap(-1, 4096)
        mm[:] = start
        if store is None:
            out.append(None)
            continue
        at = 0
        for i, rec in enumerate(recs):
            # the whole of data (a single send), and a record inside a batch
            assert store(mm, at, rec, 0, len(rec), 3, 100 + i, 1 << 30, 1_700_000_000_000, HOST) is None
            at += len(rec)
            pos = sum(len(r) for r in recs[:i])
            assert store(mm, at, batch, pos, len(rec), 4, 200 + i, 1 << 30, 1_700_000_000_001, HOST) is None
            at += len(rec)
        out.append(bytes(mm))
        mm.close()
    if out[0] is not None:
        assert out[0] == out[1]
    starts = [sum(len(r) for r in recs[: i // 2]) + sum(len(r) for r in recs[: (i + 1) // 2]) for i in range(6)]
    assert [record.unpack_record(out[1], p)[9] for p in starts] == [100, 200, 101, 201, 102, 202]


# --- the decoders ---------------------------------------------------------------------------------------


@SETTINGS
@given(data=hostile_buffers(), pos=st.integers(-200, 400))
def test_unpack_record_agrees(data: bytes, pos: int) -> None:
    assert outcome(record.unpack_record, data, pos) == outcome(record.unpack_record_py, data, pos)
    mv = memoryview(data)
    assert outcome(record.unpack_record, mv, pos) == outcome(record.unpack_record_py, mv, pos)


@SETTINGS
@given(data=hostile_buffers(), wrap=st.sampled_from([bytes, bytearray, memoryview]))
def test_iter_records_agrees(data: bytes, wrap: Callable[[bytes], Any]) -> None:
    def collect(it: Callable[[Any], Any]) -> tuple[list[Any], Any]:
        got: list[Any] = []
        try:
            for f in it(wrap(data)):
                got.append(f)
        except Exception as exc:
            return got, (type(exc), str(exc))
        return got, None

    assert collect(record.iter_records) == collect(record.iter_records_py)


@SETTINGS
@given(data=hostile_buffers(), wrap=st.sampled_from([bytes, bytearray, memoryview]))
def test_record_columns_agrees(data: bytes, wrap: Callable[[bytes], Any]) -> None:
    """The columns and the error that ended the scan, the same from the accelerator and from Python,
    and the same records as iter_records (the Spark connector's decoder reads these)."""
    fast, slow = record_columns(wrap(data)), record_columns_py(wrap(data))
    assert fast[:-1] == slow[:-1]
    assert outcome_of(fast.error) == outcome_of(slow.error)
    rows = list(record.iter_records_py(data[: _scanned_end(slow)]))
    assert slow.records == len(rows)
    if rows:
        ends = struct.unpack(f"={6 * slow.records + 1}i", slow.bounds)
        assert [ends[6 * i] for i in range(slow.records)] == [r[13] for r in rows]
        assert [ends[6 * i + 5] for i in range(slow.records)] == [r[16] for r in rows]
        assert struct.unpack(f"={slow.records}q", slow.queue_offsets) == tuple(r[9] for r in rows)
        assert slow.store_hosts == b"".join(r[12] for r in rows)


def _as_stored(data: bytes, base: int, fix: int) -> bytes:
    """``data`` with the physical-offset field of its first ``fix`` records (following the size
    fields) set to where they lie, ``base`` being the offset of byte 0: what a scan accepts."""
    buf = bytearray(data)
    pos = 0
    for _ in range(fix):
        if pos + 92 > len(buf):
            break
        size = struct.unpack_from(">i", buf, pos)[0]
        if size < 92:
            break
        struct.pack_into(">q", buf, pos + 60, base + pos)
        pos += size
    return bytes(buf)


@SETTINGS
@given(
    data=hostile_buffers(),
    base=st.sampled_from([0, 4096, 2**40]),
    fix=st.integers(0, 6),
    check_crc=st.booleans(),
    start=st.sampled_from([0, 0, 0, 1, 8, 92]),
    cut=st.integers(0, 100),
    max_records=st.sampled_from([0, 1, 2, 4096]),
    wrap=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_stored_scan_agrees(
    data: bytes,
    base: int,
    fix: int,
    check_crc: bool,
    start: int,
    cut: int,
    max_records: int,
    wrap: Callable[[bytes], Any],
) -> None:
    """A stored-record scan (recovery, replication) verifies the same records from the accelerator
    and from Python, and stops at the same place, as cleanly."""
    buf = _as_stored(data, base, fix)
    limit = max(0, len(buf) - cut)
    scan = record_batch.StoredScan(wrap(buf), start, limit, base, check_crc)
    fast = (scan.batch(max_records), scan.pos, scan.clean)
    assert fast == record_batch.stored_scan_py(wrap(buf), start, limit, base, check_crc, max_records)


def test_stored_scan_takes_whole_stored_records_batch_by_batch() -> None:
    base = 1 << 30
    buf = bytearray()
    for i in range(5):
        buf += encode_record(
            b"T",
            b"x" * (10 * i),
            encode_properties({"TAGS": "a"}),
            born_host=HOST,
            queue_id=1,
            queue_offset=100 + i,
            physical_offset=base + len(buf),
            store_timestamp=5 + i,
            store_host=HOST,
        )
    whole = len(buf)
    buf += struct.pack(">iI", 64, 0xCBD43194) + bytes(56)  # a blank marker filling the rest
    data = bytes(buf)

    def scan_all(next_batch: Callable[[], list[Any]]) -> list[Any]:
        got: list[Any] = []
        while True:
            batch = next_batch()
            got += batch
            if len(batch) < 2:
                return got

    scan = record_batch.StoredScan(data, 0, len(data), base, True)
    fast = scan_all(lambda: scan.batch(2))
    at, clean = 0, True

    def python_batch() -> list[Any]:
        nonlocal at, clean
        records, at, clean = record_batch.stored_scan_py(data, at, len(data), base, True, 2)
        return records

    assert fast == scan_all(python_batch) and (at, clean) == (whole, True)
    assert [r[5] for r in fast] == [100, 101, 102, 103, 104] and [r[6] for r in fast] == [5, 6, 7, 8, 9]
    assert (scan.pos, scan.clean, scan.blank_size()) == (whole, True, 64)
    assert sum(r[1] for r in fast) == whole and fast[0][0] == 0


def outcome_of(exc: Exception | None) -> tuple[type, str] | None:
    return None if exc is None else (type(exc), str(exc))


def _scanned_end(cols: RecordColumns) -> int:
    return struct.unpack_from("=i", cols.bounds, 4 * 6 * cols.records)[0]


def test_record_columns_of_a_compressed_record_and_an_empty_buffer() -> None:
    data = encode_record(b"T", zlib.compress(b"b" * 100), b"", sys_flag=1, reconsume_times=3, queue_id=5)
    for cols in (record_columns(data), record_columns_py(data)):
        assert cols.records == 1 and cols.error is None
        assert struct.unpack("=i", cols.sys_flags) == (1,) and struct.unpack("=i", cols.reconsumes) == (3,)
        assert struct.unpack("=i", cols.queue_ids) == (5,)
    assert record_columns(b"")[:-1] == record_columns_py(b"")[:-1] == (0, *[b""] * 8, struct.pack("=i", 0))


#: pieces of hostile properties: the names the decoder looks for, separators, spaces, and bytes
#: that are not UTF-8 (a bad lead byte, a surrogate, past U+10FFFF, an overlong form, a cut sequence)
_PROPERTY_PIECES = st.one_of(
    st.sampled_from(
        [b"TAGS", b"KEYS", b"UNIQ_KEY", b"\x01", b"\x02", b" ", b"a", "ü".encode(), "€".encode(), "😀".encode()]
    ),
    st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82", b"\x80"]),
    st.binary(max_size=6),
)

#: pieces of UTF-8 properties
_UTF8_PIECES = st.one_of(
    st.sampled_from(
        [b"TAGS\x01", b"KEYS\x01", b"KEYS\x01 k1  k2", b"UNIQ_KEY\x01", b"\x01", b"\x02", b" ", b"a", "ü".encode()]
    ),
    st.text(max_size=4).map(str.encode),
)


@st.composite
def property_records(draw: st.DrawFn) -> bytes:
    """Well-framed records whose topics and properties are hostile: odd separators, repeated names,
    empty values, bytes that are not UTF-8 (mostly valid, so the columns get built)."""
    out = []
    for i in range(draw(st.integers(0, 5))):
        pieces = draw(st.lists(_PROPERTY_PIECES if draw(st.integers(0, 3)) == 0 else _UTF8_PIECES, max_size=16))
        topic = draw(st.sampled_from([b"T", "tópico".encode(), b"", b"\xff" if i == 3 else b"T"]))
        out.append(
            encode_record(
                topic,
                draw(st.binary(max_size=40)),
                b"".join(pieces),
                physical_offset=draw(st.integers(0, 2**40)),
                store_host=draw(st.sampled_from([HOST, bytes(range(8))])),
            )
        )
    return b"".join(out)


@SETTINGS
@given(data=st.one_of(hostile_buffers(), property_records()), wrap=st.sampled_from([bytes, bytearray, memoryview]))
def test_record_string_columns_agrees(data: bytes, wrap: Callable[[bytes], Any]) -> None:
    """The fixed columns, the error and the string columns (or None for a record that is not UTF-8)
    the same from the accelerator and from Python."""
    (fast, fast_strings), (slow, slow_strings) = record_string_columns(wrap(data)), record_string_columns_py(wrap(data))
    assert fast[:-1] == slow[:-1] == record_columns_py(data)[:-1]
    assert outcome_of(fast.error) == outcome_of(slow.error)
    assert fast_strings == slow_strings


def _ints(raw: bytes) -> list[int]:
    return list(struct.unpack(f"={len(raw) // 4}i", raw))


def _cut(offsets: bytes, data: bytes) -> list[bytes]:
    at = _ints(offsets)
    return [data[a:b] for a, b in itertools.pairwise(at)]


@pytest.mark.parametrize("impl", [record_string_columns, record_string_columns_py])
def test_string_columns_split_properties_as_the_row_decoder_reads_them(impl: Callable[[bytes], Any]) -> None:
    props = b"TAGS\x01a\x02\x02KEYS\x01 k1  k2\x02bare\x02UNIQ_KEY\x01U\x02KEYS\x01k3\x02UNIQ_KEY\x01\x02TAGS\x01b"
    data = encode_record(b"T", b"body", props, physical_offset=0x1234, store_host=HOST)
    data += encode_record(b"T2", b"", b"UNIQ_KEY\x01V", physical_offset=7, store_host=HOST)
    cols, strings = impl(data)
    assert isinstance(strings, StringColumns) and cols.records == 2
    assert _cut(strings.body_offsets, strings.bodies) == [b"body", b""]
    assert _cut(strings.topic_offsets, strings.topics) == [b"T", b"T2"]
    assert _ints(strings.property_offsets) == [0, 7, 8]
    assert _cut(strings.name_offsets, strings.names) == [b"TAGS", b"KEYS", b"bare", b"UNIQ_KEY", b"KEYS", b"UNIQ_KEY",
                                                         b"TAGS", b"UNIQ_KEY"]  # fmt: skip
    assert _cut(strings.value_offsets, strings.values) == [b"a", b" k1  k2", b"", b"U", b"k3", b"", b"b", b"V"]
    assert strings.tag_validity == b"\x01" and _cut(strings.tag_offsets, strings.tags) == [b"b", b""]
    # The last unique key is empty: the offset message id stands in.
    assert _cut(strings.id_offsets, strings.ids) == [record.offset_msg_id(HOST, 0x1234).encode(), b"V"]
    assert _ints(strings.key_list_offsets) == [0, 3, 3]
    assert _cut(strings.key_offsets, strings.keys) == [b"k1", b"k2", b"k3"]
    assert impl(data + encode_record(b"T", b"", b"TAGS\x01\xff"))[1] is None


def test_the_decoders_hand_odd_buffers_to_the_python_code() -> None:
    data = encode_record(b"T", b"body", b"")
    as_ints = memoryview(data + bytes(-len(data) % 4)).cast("I")
    assert outcome(record.unpack_record, as_ints, 0) == outcome(record.unpack_record_py, as_ints, 0)
    assert outcome(list, record.iter_records(as_ints)) == outcome(list, record.iter_records_py(as_ints))


# --- the dispatcher's property rule ---------------------------------------------------------------------

_KEY_NAMES = st.sampled_from([b"UNIQ_KEY", b"TAGS", b"KEYS", b"OTHER", b"UNIQ_KEYX", b"TAG", b""])
_KEY_WORDS = st.lists(st.sampled_from([b"a", b"bb", b"", b"k 1"]), max_size=4).map(b" ".join)
_ITEMS = st.one_of(
    st.tuples(_KEY_NAMES, st.binary(max_size=12)),
    st.tuples(st.just(b"KEYS"), _KEY_WORDS),
)


@st.composite
def raw_properties(draw: st.DrawFn) -> bytes:
    """Properties as a producer (or a hostile one) may send them: any order, repeats, odd separators."""
    items = draw(st.lists(_ITEMS, max_size=6))
    seps = [draw(st.sampled_from([b"\x01", b"\x01", b""])) for _ in items]
    out = b"\x02".join(k + s + v.replace(b"\x02", b"") for (k, v), s in zip(items, seps, strict=True))
    return out + draw(st.sampled_from([b"\x02", b"", b"\x02\x02"]))


def reference_codes(data: bytes, split: record_batch.SplitBatch, phys: list[int], prefix_crc: int) -> Any:
    """What Dispatcher.dispatch's Python loop computes: tags codes and (hash, phys) index entries."""
    from pymq.broker.store.dispatcher import Dispatcher

    codes = Dispatcher(lambda t, q: None, None).codes  # type: ignore[arg-type,return-value]
    tags_codes, entries = [], []
    for pos, size, props_at, at in zip(split.positions, split.sizes, split.props_ats, phys, strict=True):
        code, keys = codes(data[props_at : pos + size])
        tags_codes.append(code)
        entries += [(zlib.crc32(k, prefix_crc), at) for k in keys or ()]
    return tags_codes, entries


@SETTINGS
@given(props=st.lists(raw_properties(), max_size=5), topic=st.sampled_from([b"T", b"TopicA"]))
def test_property_codes_follow_the_dispatcher(props: list[bytes], topic: bytes) -> None:
    data = b"".join(encode_record(b"T", b"body", p) for p in props)
    split = record_batch.split_batch_py(data, topic_field(b"T"), 4 << 20)
    phys = [1000 + p for p in split.positions]
    prefix_crc = zlib.crc32(topic + b"#")
    fast = record_batch.property_codes(data, split.positions, split.sizes, split.props_ats, phys, prefix_crc)
    if _speedups is None or record.speedups is None:
        assert fast is None
    else:
        assert fast == reference_codes(data, split, phys, prefix_crc)


@SETTINGS
@given(props=raw_properties(), topic=st.sampled_from([b"T", b"TopicA"]), whole=st.booleans())
def test_property_codes_one_follows_the_dispatcher(props: bytes, topic: bytes, whole: bool) -> None:
    """The single-send entry point: the dispatcher's codes of one record, as property_codes gives them."""
    rec = encode_record(b"T", b"body", props)
    data = rec if whole else encode_record(b"T", b"x", b"") + rec + b"tail"
    split = record_batch.split_batch_py(data, topic_field(b"T"), 4 << 20)
    one = record_batch.SplitBatch(split.positions[-1:], split.sizes[-1:], split.props_ats[-1:], [])
    phys = 1000 + one.positions[0]
    prefix_crc = zlib.crc32(topic + b"#")
    fast = record_batch.property_codes_one(data, one.positions[0], one.sizes[0], one.props_ats[0], phys, prefix_crc)
    if _speedups is None or record.speedups is None:
        assert fast is None
    else:
        codes, entries = reference_codes(data, one, [phys], prefix_crc)
        assert fast == (codes[0], entries)


def test_property_codes_one_hands_odd_arguments_back() -> None:
    data = encode_record(b"T", b"body", b"TAGS\x01a\x02")
    n = len(data)
    # out of range, a prefix that is no crc, not bytes: None (the dispatcher's own code runs)
    for args in [
        (data, 0, n + 1, 90, 0, 0),
        (data, -1, n, 90, 0, 0),
        (data, 0, n, n + 1, 0, 0),
        (data, 0, n, -1, 0, 0),
        (data, 0, n, 90, 0, -1),
        (data, 0, n, 90, 0, 2**32),
        (bytearray(data), 0, n, 90, 0, 0),
        (data, 0, float(n), 90, 0, 0),
    ]:
        assert record_batch.property_codes_one(*args) is None  # type: ignore[arg-type]
    if record.speedups is not None:
        assert record_batch.property_codes_one(data, 0, n, n - 7, 7, 0) == (zlib.crc32(b"a"), [])


def test_property_codes_hand_odd_arguments_back() -> None:
    data = encode_record(b"T", b"body", b"TAGS\x01a\x02")
    # out of range, mismatched lengths, a prefix that is no crc: None (the dispatcher's own loop runs)
    assert record_batch.property_codes(data, [0], [len(data) + 1], [90], [0], 0) is None
    assert record_batch.property_codes(data, [0], [len(data)], [90], [], 0) is None
    assert record_batch.property_codes(data, [0], [len(data)], [90], [0], -1) is None


# --- the client's encode --------------------------------------------------------------------------------

_I32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31, -(2**31) - 1, True]))
_I64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([2**63, -(2**63) - 1]))
_HOSTS = st.sampled_from([HOST, b"", b"1234567", b"123456789", bytearray(HOST)])
_BODIES = st.one_of(
    st.binary(max_size=200), st.binary(max_size=10).map(bytearray), st.binary(max_size=10).map(memoryview)
)


@SETTINGS
@given(
    topic=st.one_of(st.binary(max_size=20), st.just(b"t" * 0x10000)),
    body=st.one_of(
        st.binary(max_size=200), st.binary(max_size=10).map(bytearray), st.binary(max_size=10).map(memoryview)
    ),
    props=st.one_of(st.binary(max_size=50), st.just(b"p" * 32768)),
    ints=st.tuples(_I32, _I32, _I64, _I32, _I64, _I32, _I64, _I64, _I64),
    hosts=st.tuples(_HOSTS, _HOSTS),
)
def test_encode_record_agrees(
    topic: bytes, body: bytes, props: bytes, ints: tuple[int, ...], hosts: tuple[bytes, bytes]
) -> None:
    flag, sys_flag, born_ts, reconsume, prepared, qid, qoff, phys, store_ts = ints
    kwargs = dict(
        flag=flag, sys_flag=sys_flag, born_timestamp=born_ts, born_host=hosts[0], reconsume_times=reconsume,
        prepared_tx_offset=prepared, queue_id=qid, queue_offset=qoff, physical_offset=phys,
        store_timestamp=store_ts, store_host=hosts[1],
    )  # fmt: skip
    assert outcome(lambda: record.encode_record(topic, body, props, **kwargs)) == outcome(
        lambda: record.encode_record_py(topic, body, props, **kwargs)
    )


def test_the_accelerator_was_built_for_this_index_layout() -> None:
    from pymq.broker.store.index import _SLOT, ENTRY, ENTRY_SIZE

    expected = {"ENTRY": ENTRY.format, "ENTRY_SIZE": ENTRY_SIZE, "SLOT": _SLOT.format}
    assert _speedups is None or expected == _speedups.INDEX_LAYOUT


# --- consume-queue entries -----------------------------------------------------------------------------------


@SETTINGS
@given(
    rows=st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1) | st.just(2**63),
            st.integers(-(2**31), 2**31 - 1) | st.just(2**31),
            st.integers(0, 2**32 - 1) | st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=40,
    ),
    ragged=st.booleans(),
)
def test_cq_entries_are_the_structs(rows: list[tuple[int, int, int]], ragged: bool) -> None:
    """The dispatcher's consume-queue entries: C packs what struct packs, and declines what it cannot."""
    from pymq.broker.store.dispatcher import pack_entries_py

    phys, sizes, codes = ([r[i] for r in rows] for i in range(3))
    if ragged:
        codes = [*codes, 0]
    python = outcome(pack_entries_py, phys, sizes, codes)
    if _speedups is None:
        return
    c = _speedups.cq_entries(phys, sizes, codes)
    if c is NotImplemented:
        assert python[0] == "error"  # only what the Python body refuses too (out of range, ragged)
    else:
        assert ("ok", c) == python


def test_cq_entries_decline_odd_arguments() -> None:
    if _speedups is None:
        return
    assert _speedups.cq_entries((1,), [2], [3]) is NotImplemented
    assert _speedups.cq_entries([1], [2.0], [3]) is NotImplemented
    assert _speedups.cq_entries([], [], []) == b""
