"""Capture pymq's log events in a test, as dicts (like structlog's ``capture_logs``).

    with capture_logs() as events:
        store.put(...)
    assert [e["event"] for e in events if e["log_level"] == "error"] == ["disk_full_writes_refused"]

Each event is ``{"event": ..., **fields, "log_level": "info", "component": "broker.store"}``,
plus ``"exc_info": True`` when the record carries an exception. Events logged from any
thread are captured; pymq's loggers are at DEBUG for the duration.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pymq.logs import event_fields

__all__ = ["capture_logs"]


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = event_fields(record)
        if fields is None:
            return
        event = {**fields, "log_level": record.levelname.lower(), "component": record.name.removeprefix("pymq.")}
        if record.exc_info:
            event["exc_info"] = True
        self.events.append(event)


@contextmanager
def capture_logs(logger: str = "pymq") -> Iterator[list[dict[str, Any]]]:
    """Collect the events of ``logger`` (and its children) logged inside the block."""
    target = logging.getLogger(logger)
    collector = _Collector()
    level = target.level
    target.addHandler(collector)
    target.setLevel(logging.DEBUG)
    try:
        yield collector.events
    finally:
        target.removeHandler(collector)
        target.setLevel(level)
