"""Printing command results: aligned tables for people, JSON for programs."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import click


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple, set)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Rows of dicts as an aligned table; ``columns`` are (key, header) pairs."""
    cells = [[_cell(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, (_, h) in enumerate(columns)]
    lines = ["  ".join(h.ljust(w) for (_, h), w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def emit(data: Any, as_json: bool, human: str | None = None) -> None:
    """JSON when asked (or when there is no human form), else the human text."""
    if as_json or human is None:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        click.echo(human)


def key_values(data: dict[str, Any]) -> str:
    width = max((len(k) for k in data), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in data.items())


def fmt_ms(ms: int | None) -> str | None:
    if not ms:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
