"""structlog setup: a readable console on a TTY, one JSON object per line otherwise."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "info", *, json: bool | None = None, stream: Any = None) -> None:
    """Configure structlog (and stdlib logging) for a daemon or CLI.

    ``json=None`` picks JSON unless ``stream`` (stderr by default) is a terminal.
    """
    stream = stream or sys.stderr
    lvl = _LEVELS.get(level.lower())
    if lvl is None:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    if json is None:
        json = not (hasattr(stream, "isatty") and stream.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=lvl, stream=stream, format="%(levelname)s %(name)s: %(message)s")


def get_logger(name: str, **context: Any) -> Any:
    """A bound structlog logger; ``name`` names the component (``broker.store``)."""
    # Initial values keep the proxy lazy, so loggers made at import time follow a later configure_logging().
    return structlog.get_logger(component=name, **context)


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
