"""A moved message's new record, made from the old record's bytes (properties edited as bytes).

The broker moves messages between topics: transactions store a half message in their half
topic and, on commit, store it again on its real topic. The new record keeps the old one's
body, flags, born time and host and reconsume count; it gets another topic, properties and
transaction bits. :func:`pymq.protocol.record.reencode` does that from a parsed record
(:class:`~pymq.protocol.record.RecordFields`, built field by field in Python) with properties
re-encoded from a dict; :func:`moved_record` reads the fixed head in one unpack, and
:func:`strip_properties` / :func:`property_bytes` edit the encoded properties without
decoding them. (Per transactional send that is two parses and two decode/encode rounds less.)

Part of the record module (with :mod:`pymq.protocol.record_batch`): the layout is :mod:`pymq.protocol.record`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pymq.errors import LocalProtocolError, MessageDecodeError
from pymq.protocol import record as _record
from pymq.protocol.record import BODY_POS, EMPTY_HOST, FIXED, MAGIC, Buffer, encode_record
from pymq.protocol.transaction import with_transaction_type


def property_bytes(name: str, value: str) -> bytes:
    """One encoded property, ``name\\x01value\\x02`` (as :func:`~pymq.protocol.record.encode_properties` writes it)."""
    kb = name.encode()
    vb = value.encode()
    if b"\x01" in kb or b"\x02" in kb or b"\x01" in vb or b"\x02" in vb:
        raise LocalProtocolError(f"property {name!r} contains a reserved separator byte")
    return kb + b"\x01" + vb + b"\x02"


def property_keys(*names: str) -> tuple[bytes, ...]:
    """The names as :func:`strip_properties` takes them (encoded, each followed by ``\\x01``)."""
    return tuple(n.encode() + b"\x01" for n in names)


def last_property(props: bytes, key: bytes) -> bytes | None:
    """One property's raw value as a decoder reads it (the last of several with its name), or None.

    ``key`` is a name from :func:`property_keys`. (:func:`~pymq.protocol.record.find_property`
    answers the first: the same for properties encoded from a dict, not for any bytes.)
    """
    i = props.rfind(b"\x02" + key)
    if i >= 0:
        start = i + 1 + len(key)
    elif props.startswith(key):
        start = len(key)
    else:
        return None
    end = props.find(b"\x02", start)
    return props[start:] if end < 0 else props[start:end]


#: the names of each key tuple strip_properties was given, as one search (a bounded cache)
_searches: dict[tuple[bytes, ...], Callable[[bytes], object]] = {}


def strip_properties(props: bytes, keys: tuple[bytes, ...]) -> bytes:
    """``props`` (encoded) without the properties named by ``keys`` (from :func:`property_keys`).

    What a decoder reads from the result is what it reads from ``props`` minus those names.
    When none of them occurs (the usual case) ``props`` itself comes back, else the kept
    properties in their order, each ended by ``\\x02``. A result that is not empty always ends
    with ``\\x02``, so more properties can be appended to it.
    """
    search = _searches.get(keys)
    if search is None:
        if len(_searches) >= 64:
            _searches.clear()
        search = _searches[keys] = re.compile(b"|".join(re.escape(k) for k in keys)).search
    if search(props) is None:  # none named: one search for them all
        return props if not props or props.endswith(b"\x02") else props + b"\x02"
    names = {k[:-1] for k in keys}
    kept = [item for item in props.split(b"\x02") if item and item.partition(b"\x01")[0] not in names]
    return b"\x02".join(kept) + b"\x02" if kept else b""


def moved_record(
    buf: Buffer,
    pos: int,
    topic: bytes,
    properties: bytes,
    *,
    tx_type: int | None = None,
    prepared_tx_offset: int | None = None,
) -> bytes:
    """The record at ``pos`` of ``buf``, moved: a new producer-side record for ``topic`` with
    ``properties``; body, flags, born time and host and reconsume count carry over, the
    transaction bits of the sys flag become ``tx_type`` and ``prepared_tx_offset`` is replaced,
    each if given. (:func:`~pymq.protocol.record.reencode` without parsing the record first.)

    ``buf`` holds a whole record at ``pos`` (the caller validated it); the new one is checked
    as :func:`~pymq.protocol.record.encode_record` checks one (LocalProtocolError).
    """
    (_total, magic, _crc, flag, sys_flag, born_ts, born_host, reconsume, prepared, _qid, _qoff, _phys, _sts, _sh,
     body_len) = FIXED.unpack_from(buf, pos)  # fmt: skip
    body_at = pos + BODY_POS
    if magic != MAGIC or body_len < 0 or body_at + body_len > len(buf):
        raise MessageDecodeError(f"not a record at {pos}")
    body = buf[body_at : body_at + body_len]
    if body.__class__ is not bytes:
        body = bytes(body)
    if tx_type is not None:
        sys_flag = with_transaction_type(sys_flag, tx_type)
    if prepared_tx_offset is not None:
        prepared = prepared_tx_offset
    c = _record.speedups  # (the accelerator's encoder directly: its wrapper takes keywords)
    if c is not None:
        record = c.encode_record(
            topic, body, properties, flag, sys_flag, born_ts, born_host, reconsume, prepared, 0, 0, 0, 0, EMPTY_HOST
        )
        if record.__class__ is bytes:
            return record
    return encode_record(
        topic,
        body,
        properties,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        reconsume_times=reconsume,
        prepared_tx_offset=prepared,
    )


__all__ = ["last_property", "moved_record", "property_bytes", "property_keys", "strip_properties"]
