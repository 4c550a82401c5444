"""The record module's scanners, batch validator and patcher (what the store and decoders build on)."""

from __future__ import annotations

import pytest

from pymq.errors import MessageDecodeError
from pymq.protocol import record
from pymq.protocol.record import (
    BODY_POS,
    blank_marker,
    encode_record,
    iter_records,
    iter_spans,
    pack_host,
    parse_record,
    stored_record_size,
    topic_field,
    unpack_record,
)
from pymq.protocol.record_batch import (
    REJECT_ILLEGAL,
    REJECT_PROPERTIES_SIZE,
    StoredScan,
    patch_broker_blocks,
    split_batch,
)

# every test runs with the C accelerator and with the pure-Python record code
pytestmark = pytest.mark.usefixtures("record_impl")

HOST = pack_host("10.0.0.1", 10911)


def rec(body: bytes = b"body", topic: bytes = b"T", props: bytes = b"TAGS\x01a\x02") -> bytes:
    return encode_record(topic, body, props, flag=3, born_timestamp=7, reconsume_times=2)


def test_unpack_record_agrees_with_parse_record() -> None:
    data = b"xx" + rec(b"hello", b"Topic", b"K\x01v\x02")
    f = unpack_record(data, 2)
    r = parse_record(data, 2)
    total, crc, flag, sys_flag, born_ts, _bh, reconsume, _prep, qid, qoff, phys, ts, _sh, b0, t0, p0, end = f
    assert (total, crc, flag, sys_flag, born_ts, reconsume) == (r.total_size, r.body_crc, 3, 0, 7, 2)
    assert (qid, qoff, phys, ts) == (0, 0, 0, 0)
    assert data[b0 : t0 - 2] == b"hello" and data[t0 : p0 - 2] == b"Topic" and data[p0:end] == b"K\x01v\x02"
    assert end == len(data)
    with pytest.raises(MessageDecodeError):
        unpack_record(data[:-1], 2)
    with pytest.raises(MessageDecodeError):
        unpack_record(b"\x00" * 200)


def test_iterators_stop_at_a_blank_marker() -> None:
    a, b = rec(b"a"), rec(b"bb")
    buf = a + b + blank_marker(64) + bytes(56)
    assert list(iter_spans(buf)) == [(0, len(a)), (len(a), len(b))]
    assert [f[16] for f in iter_records(buf)] == [len(a), len(a) + len(b)]
    assert list(iter_spans(a + b"\x00" * 20)) == [(0, len(a))]  # zeros are not a record


def test_split_batch_reports_each_refusal_at_its_place() -> None:
    good = rec()
    bad_crc = bytearray(rec())
    bad_crc[BODY_POS] ^= 1
    other_topic = rec(topic=b"U")
    with pytest.MonkeyPatch.context() as mp:  # a producer cannot encode it; a peer might send it
        mp.setattr(record, "MAX_PROPERTIES_SIZE", 65535)
        big_props = rec(props=b"k\x01" + b"v" * 32800 + b"\x02")
    data = good + bytes(bad_crc) + other_topic + big_props + good
    positions, sizes, props_ats, rejected = split_batch(data, topic_field(b"T"), 1 << 20)
    assert positions == [0, len(data) - len(good)] and sizes == [len(good)] * 2
    assert data[props_ats[0] : positions[0] + sizes[0]] == b"TAGS\x01a\x02"
    assert [(n, kind) for n, kind, _ in rejected] == [
        (1, REJECT_ILLEGAL),
        (2, REJECT_ILLEGAL),
        (3, REJECT_PROPERTIES_SIZE),
    ]
    assert rejected[0][2] == "body crc mismatch" and "topic differs" in rejected[1][2]
    # A header that cannot be trusted ends the batch.
    _, _, _, rejected = split_batch(good + b"\x00" * 100 + good, topic_field(b"T"), 1 << 20)
    assert [(n, kind) for n, kind, _ in rejected] == [(1, REJECT_ILLEGAL)]
    # Too big for the store.
    _, _, _, rejected = split_batch(good, topic_field(b"T"), len(good) - 1)
    assert "exceeds the maximum" in rejected[0][2]


def test_patched_records_pass_the_stored_scan() -> None:
    """Copied records are refused by StoredScan until their broker blocks are patched."""
    a, b = rec(b"a"), rec(b"b")
    file = bytearray(4096)
    file[100 : 100 + len(a) + len(b)] = a + b
    scan = StoredScan(file, 100, len(file), 5000, check_crc=True)
    assert list(scan) == [] and not scan.clean and scan.pos == 100
    patch_broker_blocks(file, [100, 100 + len(a)], 3, 40, 5000, 1234, HOST)
    scan = StoredScan(file, 100, len(file), 5000, check_crc=True)
    got = list(scan)
    assert [(pos, size, qid, qoff, ts) for pos, size, _t, _p, qid, qoff, ts in got] == [
        (100, len(a), 3, 40, 1234),
        (100 + len(a), len(b), 3, 41, 1234),
    ]
    # Zeros after the data are not a record: the scan stops there (not "clean": no blank marker).
    assert not scan.clean and scan.pos == 100 + len(a) + len(b)
    r = parse_record(file, 100 + len(a))
    assert (r.queue_id, r.queue_offset, r.physical_offset, r.store_host) == (3, 41, 5100 + len(a), HOST)
    assert stored_record_size(file, 100, len(file), 5100) == len(a)
    assert stored_record_size(file, 100, len(file), 5101) == 0  # not where its own offset says
    file[100 + BODY_POS] ^= 1
    scan = StoredScan(file, 100, len(file), 5000, check_crc=True)
    assert list(scan) == [] and not scan.clean
    assert len(list(StoredScan(file, 100, len(file), 5000, check_crc=False))) == 2
    end = 100 + len(a) + len(b)
    file[end : end + 8] = blank_marker(len(file) - end)
    scan = StoredScan(file, 100, len(file), 5000, check_crc=False)
    assert len(list(scan)) == 2 and scan.clean and scan.blank_size() == len(file) - end
