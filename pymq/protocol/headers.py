"""Typed access to a command's ext fields, with clear errors for missing or ill-typed values.

Values may arrive as strings (RocketMQ's wire format carries every header field as a
string), so numbers and booleans are coerced here, once, for every handler.
"""

from __future__ import annotations

from typing import Any

import msgpack

from pymq.errors import InvalidRequestError

_MISSING = object()


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
    value = _get(ext, name, default)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidRequestError(f"header field {name!r} must be an integer, got {value!r}") from None


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
