"""What the daemons share: logging, the event loop, signals, the port file and exit codes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

import click

from pymq import DISTRIBUTION
from pymq.cli.security_options import daemon_security_options
from pymq.errors import ConfigError, StoreLockedError
from pymq.logs import configure_logging, get_logger
from pymq.transport.loop import run

# Exit codes of the daemons (documented in README.md and deploy/README.md):
#: stopped cleanly (SIGTERM / SIGINT)
EXIT_OK = 0
#: any other failure; at startup, an operating-system error not covered below (one line on stderr)
EXIT_FAILURE = 1
#: the configuration is invalid or cannot be used: a bad value, the listen (or metrics) port in use
#: or not permitted, a store directory that cannot be created or written
EXIT_CONFIG = 2
#: the store directory is in use by another broker
EXIT_STORE_LOCKED = 3

log = get_logger("cli")


class Daemon(Protocol):
    @property
    def address(self) -> str: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def version_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--version``: the installed package's version, from its metadata."""
    return click.version_option(package_name=DISTRIBUTION, message="%(prog)s %(version)s")(f)


def log_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--log-level", default=None, help="debug, info, warning or error (default info).")(f)
    f = click.option(
        "--log-format",
        type=click.Choice(["auto", "console", "json"]),
        default="auto",
        show_default=True,
        help="auto: console on a terminal, JSON otherwise.",
    )(f)
    return f


def daemon_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """What both daemons take after their own options: ``--metrics-port``, the ACL/TLS options,
    ``--port-file`` and the log options (in that order in ``--help``)."""
    f = log_options(f)
    f = click.option("--port-file", type=click.Path(dir_okay=False), help="Write host:port here once serving.")(f)
    f = daemon_security_options(f)
    return click.option(
        "--metrics-port",
        type=int,
        default=None,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port; needs pymq-rocket[metrics]).",
    )(f)


def setup_logging(level: str, fmt: str) -> None:
    try:
        configure_logging(level, json=None if fmt == "auto" else fmt == "json")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--log-level") from exc


def startup_failure(exc: ConfigError | StoreLockedError | OSError) -> tuple[str, int]:
    """What a daemon that could not start says (the line after ``error: ``) and its exit code.

    pymq-namesrv, pymq-broker and pymq-local all say it this way: the same cause reads the same."""
    if isinstance(exc, ConfigError):
        return str(exc), EXIT_CONFIG
    if isinstance(exc, StoreLockedError):
        return str(exc), EXIT_STORE_LOCKED
    # Whatever the daemon did not turn into a ConfigError: still one line, not a traceback.
    return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), EXIT_FAILURE


def startup_error(message: str) -> None:
    """One plain line on stderr, whatever the log format: the daemon never served, so no JSON log."""
    click.echo(f"error: {message}", err=True)


def run_daemon(
    make: Callable[[], Daemon], port_file: str | None, on_started: Callable[[Daemon], None] | None = None
) -> int:
    """Start the daemon, serve until SIGTERM/SIGINT, stop gracefully; returns the exit code."""

    async def main() -> int:
        app = make()
        try:
            await app.start()
        except (ConfigError, StoreLockedError, OSError) as exc:
            message, code = startup_failure(exc)
            startup_error(message)
            return code
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if port_file:
            write_port_file(Path(port_file), app.address)
        if on_started is not None:
            on_started(app)
        await stop.wait()
        log.info("shutting_down")
        await app.close()
        return EXIT_OK

    return run(main())


def serve(
    model: type[Any],
    config_path: str | None,
    overrides: dict[str, Any],
    log_format: str,
    port_file: str | None,
    make: Callable[[Any], Daemon],
) -> None:
    """The body of a daemon command: load and validate the config (exit 2 on a bad value), set up
    logging, serve until a signal, exit with the daemon's code."""
    from pymq.config import load_config

    try:
        config = load_config(model, config_path, overrides=overrides)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
        return
    setup_logging(config.log_level, log_format)
    sys.exit(run_daemon(lambda: make(config), port_file))


def run_async(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    return run(main())


def write_port_file(path: Path, address: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(address + "\n")
    os.replace(tmp, path)


def fail(message: str, code: int = EXIT_FAILURE) -> None:
    """One line on stderr, then exit: what a CLI error should look like."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
