"""record_edit: a moved record equals reencode's, and byte-level property edits read as dict edits."""

from __future__ import annotations

import pytest

from pymq.errors import LocalProtocolError, MessageDecodeError
from pymq.protocol import record
from pymq.protocol.record import decode_properties, encode_properties, encode_record, parse_record, reencode
from pymq.protocol.record_edit import last_property, moved_record, property_bytes, property_keys, strip_properties
from pymq.protocol.transaction import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, with_transaction_type

PROPS = {"UNIQ_KEY": "ABC", "TRAN_MSG": "true", "PGROUP": "g", "KEYS": "k1 k2"}


def _record(**fields: int) -> bytes:
    return encode_record(b"orders", b"body" * 100, encode_properties(PROPS), **fields)


@pytest.mark.parametrize("impl", ["speedups", "pure-python"])
@pytest.mark.parametrize(
    "edit",
    [{}, {"tx_type": TRANSACTION_COMMIT_TYPE}, {"tx_type": TRANSACTION_NOT_TYPE, "prepared_tx_offset": 4096}],
)
def test_moved_record_is_reencode(monkeypatch: pytest.MonkeyPatch, impl: str, edit: dict[str, int]) -> None:
    if impl == "pure-python":
        monkeypatch.setattr(record, "speedups", None)
    old = _record(flag=3, sys_flag=0x1 | 0x4, born_timestamp=77, reconsume_times=2, prepared_tx_offset=9)
    r = parse_record(old)
    want = reencode(
        r,
        b"RMQ_SYS_TRANS_HALF_TOPIC",
        b"A\x01b\x02",
        sys_flag=with_transaction_type(r.sys_flag, edit["tx_type"]) if "tx_type" in edit else None,
        prepared_tx_offset=edit.get("prepared_tx_offset"),
    )
    assert moved_record(old, 0, b"RMQ_SYS_TRANS_HALF_TOPIC", b"A\x01b\x02", **edit) == want
    # from a view inside a bigger buffer (a record read from the commitlog)
    buf = memoryview(b"\x00" * 7 + old + b"\x00" * 5)
    assert moved_record(buf, 7, b"RMQ_SYS_TRANS_HALF_TOPIC", b"A\x01b\x02", **edit) == want


def test_moved_record_refuses_what_is_no_record_and_what_cannot_be_one() -> None:
    with pytest.raises(MessageDecodeError):
        moved_record(b"\x00" * 200, 0, b"t", b"")
    with pytest.raises(LocalProtocolError):
        moved_record(_record(), 0, b"t", b"x" * 40000)


@pytest.mark.parametrize(
    "props",
    [
        PROPS,
        {},
        {"UNIQ_KEY": "x"},
        {"TRAN_MSG": "true"},
        {"REAL_TOPIC": "t", "DELAY": "3", "A": "1"},
    ],
)
def test_strip_properties_reads_as_the_dict_without_them(props: dict[str, str]) -> None:
    names = ("TRAN_MSG", "DELAY", "REAL_TOPIC", "MISSING")
    out = strip_properties(encode_properties(props), property_keys(*names))
    assert decode_properties(out) == {k: v for k, v in props.items() if k not in names}
    assert out == b"" or out.endswith(b"\x02")  # more can be appended


def test_strip_properties_of_raw_bytes() -> None:
    keys = property_keys("X")
    # every copy of a name goes; a name that only ends like another stays; a missing last separator is added
    assert strip_properties(b"X\x011\x02AX\x012\x02X\x013", keys) == b"AX\x012\x02"
    assert strip_properties(b"A\x011", keys) == b"A\x011\x02"
    assert strip_properties(b"", keys) == b""
    appended = strip_properties(b"A\x011", keys) + property_bytes("REAL_TOPIC", "t")
    assert decode_properties(appended) == {"A": "1", "REAL_TOPIC": "t"}


def test_last_property_reads_what_a_decoder_reads() -> None:
    (key,) = property_keys("PGROUP")
    for raw in (b"PGROUP\x01a\x02", b"X\x011\x02PGROUP\x01a\x02PGROUP\x01b\x02", b"PGROUP\x01a", b"XPGROUP\x01a\x02"):
        value = decode_properties(raw).get("PGROUP")
        assert last_property(raw, key) == (None if value is None else value.encode())
    assert last_property(b"", key) is None


def test_property_bytes_refuses_separators() -> None:
    assert property_bytes("REAL_QID", "3") == b"REAL_QID\x013\x02"
    with pytest.raises(LocalProtocolError):
        property_bytes("REAL_TOPIC", "a\x02b")
