"""How pymq logs: through stdlib :mod:`logging`, under the ``pymq`` logger namespace.

Every module logs structured events with :func:`get_logger`: ``log.info("queue_assigned",
topic=t, queues=n)`` becomes a record of the stdlib logger ``pymq.<component>`` whose
message reads ``queue_assigned topic=orders queues=4`` and whose ``pymq_fields`` attribute
holds the event and its fields as a dict. As a library (the SDK, and the test kit's servers
run in-process) pymq therefore does what the application's logging
set-up says: unconfigured, Python shows WARNING and above on stderr and drops the rest;
nothing ever goes to stdout. Turn the SDK's logs on like any library's::

    logging.basicConfig(level=logging.INFO)                 # everything, pymq included
    logging.getLogger("pymq").setLevel(logging.DEBUG)       # or: pymq in more detail

The daemons and CLIs call :func:`configure_logging`, which renders every record with
structlog: a readable console on a terminal, one JSON object per line otherwise.
"""

from __future__ import annotations

import datetime
import json as _json
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

#: the LogRecord attribute holding a pymq event's structured form: {"event": ..., **fields}
FIELDS_ATTR = "pymq_fields"


class Logger:
    """Structured events onto one stdlib logger; a disabled level costs one cached level check."""

    __slots__ = ("_context", "_logger")

    def __init__(self, logger: logging.Logger, context: dict[str, Any] | None = None) -> None:
        self._logger = logger
        self._context = context or {}

    @property
    def stdlib(self) -> logging.Logger:
        return self._logger

    def bind(self, **context: Any) -> Logger:
        """A logger adding these fields to every event."""
        return Logger(self._logger, {**self._context, **context})

    def debug(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.DEBUG):
            self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.INFO):
            self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.WARNING):
            self._emit(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit(logging.ERROR, event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled (``exc_info`` defaults to it)."""
        if self._logger.isEnabledFor(logging.ERROR):
            fields.setdefault("exc_info", True)
            self._emit(logging.ERROR, event, fields)

    def _emit(self, level: int, event: str, fields: dict[str, Any]) -> None:
        exc_info = fields.pop("exc_info", None)
        if self._context:
            fields = {**self._context, **fields}
        self._logger.log(
            level,
            _LazyMessage(event, fields),
            exc_info=exc_info,
            extra={FIELDS_ATTR: {"event": event, **fields}},
            stacklevel=3,  # the caller of log.info(...), for %(funcName)s and %(lineno)d
        )


class _LazyMessage:
    """A record's ``msg``: the ``event key=value`` text, built only if a formatter asks for it
    (the daemons' JSON formatter never does)."""

    __slots__ = ("event", "fields")

    def __init__(self, event: str, fields: dict[str, Any]) -> None:
        self.event = event
        self.fields = fields

    def __str__(self) -> str:
        return _message(self.event, self.fields)


def _message(event: str, fields: dict[str, Any]) -> str:
    """``event key=value ...``: what a plain stdlib formatter prints."""
    if not fields:
        return event
    return " ".join([event, *(f"{k}={_text(v)}" for k, v in fields.items())])


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value if value and not any(c in value for c in " =\"'") else repr(value)
    return str(value)


def get_logger(name: str, **context: Any) -> Logger:
    """The logger of component ``name`` (``broker.store`` logs as ``pymq.broker.store``)."""
    return Logger(logging.getLogger(f"pymq.{name}"), context)


def event_fields(record: logging.LogRecord) -> dict[str, Any] | None:
    """A pymq record's event and fields (``{"event": ..., ...}``); None for other records."""
    fields = getattr(record, FIELDS_ATTR, None)
    return fields if isinstance(fields, dict) else None


# --- daemons and CLIs ------------------------------------------------------------------------------------


class _DaemonHandler(logging.StreamHandler):  # type: ignore[type-arg]  # generic in typeshed only
    """The handler configure_logging installs (so a second call replaces it)."""


def configure_logging(level: str = "info", *, json: bool | None = None, stream: Any = None) -> None:
    """Make this process render every log record with structlog: for daemons and CLIs only.

    ``json=None`` picks JSON unless ``stream`` (stderr by default) is a terminal. A library
    never calls this: it installs a root handler and sets the root level.
    """
    import structlog  # only the daemons render with structlog; the SDK needs nothing but logging

    stream = stream or sys.stderr
    lvl = _LEVELS.get(level.lower())
    if lvl is None:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    tty = hasattr(stream, "isatty") and stream.isatty()
    if json is None:
        json = not tty
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=tty)
    pre_chain: list[Any] = [
        _structured_fields,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json:
        pre_chain.append(structlog.processors.format_exc_info)
    formatter: logging.Formatter = structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=pre_chain,
    )
    if json:
        formatter = _JsonEvents(formatter)
    handler = _DaemonHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _DaemonHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(lvl)


def _structured_fields(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog pre-chain step: a pymq record renders its event and fields, others their message."""
    record: logging.LogRecord = event_dict["_record"]
    fields = event_fields(record)
    if fields is None:
        event_dict["logger"] = record.name
        return event_dict
    out: dict[str, Any] = {"component": record.name.removeprefix("pymq."), **fields}
    for key in ("exc_info", "_record", "_from_structlog"):
        if key in event_dict:
            out[key] = event_dict[key]
    return out


_UTC = datetime.UTC


class _JsonEvents(logging.Formatter):
    """The JSON line of a pymq event, as structlog's chain above renders it, at a sixth of the cost.

    A daemon logs an event per client connecting, per rejected request: structlog's
    ProcessorFormatter copies each record and runs five processors (~110 us a line), which a
    flood of bad requests turns into most of the broker's time. Records with an exception, and
    records that are not pymq events, still go through structlog.
    """

    def __init__(self, structlog_formatter: logging.Formatter) -> None:
        super().__init__()
        self._structlog = structlog_formatter

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, FIELDS_ATTR, None)
        if fields.__class__ is not dict or record.exc_info or record.stack_info:
            return self._structlog.format(record)
        line = {"component": record.name.removeprefix("pymq."), **fields}
        line["level"] = record.levelname.lower()
        line["timestamp"] = datetime.datetime.fromtimestamp(record.created, _UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return _json.dumps(line, default=repr)


class RateLimitedLog:
    """Log each event at most once per ``interval`` seconds; the next one says how many were held back.

    For conditions that repeat on every request or every retry (a full disk): the first
    occurrence is logged at once, then at most one line per interval, with ``suppressed``.
    """

    def __init__(self, logger: Any, interval: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        #: event -> (when last logged, occurrences held back since)
        self._state: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def log(self, level: str, event: str, **fields: Any) -> bool:
        """Log ``event`` at ``level`` unless it was logged within the interval; True if logged."""
        now = self.clock()
        with self._lock:
            last, held = self._state.get(event, (None, 0))
            if last is not None and now - last < self.interval:
                self._state[event] = (last, held + 1)
                return False
            self._state[event] = (now, 0)
        if held:
            fields["suppressed"] = held
        getattr(self.logger, level)(event, **fields)
        return True
