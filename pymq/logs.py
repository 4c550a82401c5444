"""structlog setup: a readable console on a TTY, one JSON object per line otherwise."""

from __future__ import annotations

import logging
import sys
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
