"""Concatenated records (a pull body) as columns, with no Python object per record.

:func:`record_columns` is :func:`~pymq.protocol.record.iter_records` turned sideways: each fixed
field of every record in one ``bytes`` of native integers, plus the spans of each record's body,
topic and properties, ready to wrap as Arrow buffers (the Spark connector does). The accelerator
scans the records once; :func:`record_columns_py` builds the same columns from
:func:`~pymq.protocol.record.iter_records_py` (the reference, and the path without the accelerator).
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from pymq.errors import MessageDecodeError
from pymq.protocol.record import RecordTuple, iter_records_py, speedups


class RecordColumns(NamedTuple):
    """The records' fields, column by column (native byte order; ``records`` of each)."""

    records: int
    #: int32 each
    sys_flags: bytes
    #: int64 each: born timestamps (ms)
    born: bytes
    #: int32 each
    reconsumes: bytes
    #: int32 each
    queue_ids: bytes
    #: int64 each
    queue_offsets: bytes
    #: int64 each: commitlog offsets
    physical: bytes
    #: int64 each: store timestamps (ms)
    stored: bytes
    #: 8 bytes each (4 of IPv4 address, 4 of port), as :func:`~pymq.protocol.record.offset_msg_id` takes them
    store_hosts: bytes
    #: int32, ``6 * records + 1``: per record, the buffer positions of its body, the 2-byte gap, its
    #: topic, the 2-byte gap, its properties and its end (so span ``6i`` of a binary array with these
    #: offsets is record i's body, ``6i + 2`` its topic, ``6i + 4`` its properties), then the last end
    bounds: bytes
    #: the error of the record that ended the scan early (the columns hold the records before it)
    error: MessageDecodeError | None


def record_columns(buf: bytes | bytearray | memoryview) -> RecordColumns:
    """The records of ``buf`` up to a blank marker, its end or a bad record, as columns.

    ``buf`` must be under 2 GiB (the bounds are int32, Arrow's binary offsets).
    """
    if speedups is not None:
        cols = speedups.record_columns(buf)
        if cols is not NotImplemented:
            return RecordColumns(*cols)
    return record_columns_py(buf)


def record_columns_py(buf: bytes | bytearray | memoryview) -> RecordColumns:
    """:func:`record_columns` in pure Python (the reference for the accelerator)."""
    rows: list[RecordTuple] = []
    error = None
    try:
        rows.extend(iter_records_py(buf))
    except MessageDecodeError as exc:
        error = exc
    if not rows:
        return RecordColumns(0, b"", b"", b"", b"", b"", b"", b"", b"", array("i", [0]).tobytes(), error)
    (_total, _crc, _flag, sys_flags, born, _bh, reconsumes, _prep, qids, qoffs, phys, stored,
     store_hosts, body_ats, topic_ats, props_ats, ends) = zip(*rows, strict=True)  # fmt: skip
    n = len(rows)
    bounds = array("i", [0]) * (6 * n + 1)
    bounds[0:-1:6] = array("i", body_ats)
    bounds[1:-1:6] = array("i", [t - 2 for t in topic_ats])
    bounds[2:-1:6] = array("i", topic_ats)
    bounds[3:-1:6] = array("i", [p - 2 for p in props_ats])
    bounds[4:-1:6] = array("i", props_ats)
    bounds[5::6] = array("i", ends)
    bounds[-1] = ends[-1]
    return RecordColumns(
        n,
        array("i", sys_flags).tobytes(),
        array("q", born).tobytes(),
        array("i", reconsumes).tobytes(),
        array("i", qids).tobytes(),
        array("q", qoffs).tobytes(),
        array("q", phys).tobytes(),
        array("q", stored).tobytes(),
        b"".join(store_hosts),
        bounds.tobytes(),
        error,
    )
