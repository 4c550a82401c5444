"""Typed access to a command's ext fields, with clear errors for missing or ill-typed values.

Values may arrive as strings (RocketMQ's wire format carries every header field as a
string), so numbers and booleans are coerced here, once, for every handler.
"""

from __future__ import annotations

import re
from typing import Any

import msgpack

from pymq.errors import InvalidRequestError

_MISSING = object()

#: an optionally signed run of ASCII digits, at most 19 of them (int64's range needs no more)
_DECIMAL = re.compile(r"[+-]?[0-9]{1,19}")


def _get(ext: dict[str, Any], name: str, default: Any) -> Any:
    value = ext.get(name, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise InvalidRequestError(f"missing header field {name!r}")
        return default
    return value


def get_str(ext: dict[str, Any], name: str, default: Any = _MISSING) -> str:
    value = _get(ext, name, default)
    if value is default:
        return value  # type: ignore[no-any-return]  # the caller's default, of the caller's type
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        raise InvalidRequestError(f"header field {name!r} must be a string, got {type(value).__name__}")
    return value


def get_int(ext: dict[str, Any], name: str, default: Any = _MISSING) -> int:
    """An integer field: an int, an integral float (``2.0``), or a decimal string (``"-12"``).

    ``1.5``, ``"1.5"``, ``"1e3"`` and ``"0x10"`` are refused, not truncated: a request
    that says queue 1.5 is wrong, and guessing which queue it meant would hide that.
    """
    value = _get(ext, name, default)
    if isinstance(value, int):
        return int(value)  # a bool counts as 0/1 (as it always did)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    raise InvalidRequestError(f"header field {name!r} must be an integer, got {value!r}")


def check_range(name: str, value: int, lo: int, hi: int) -> None:
    """Raise InvalidRequestError naming the field unless ``lo <= value <= hi``."""
    if not lo <= value <= hi:
        raise InvalidRequestError(f"header field {name!r} must be between {lo} and {hi}, got {value}")


def get_bool(ext: dict[str, Any], name: str, default: Any = _MISSING) -> bool:
    value = _get(ext, name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise InvalidRequestError(f"header field {name!r} must be a boolean, got {value!r}")


def decode_body(body: Any, what: str = "body") -> Any:
    """Decode a msgpack request body; a bad body is the caller's error, not ours."""
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:
        raise InvalidRequestError(f"undecodable {what}: {exc}") from exc


def encode_body(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed
