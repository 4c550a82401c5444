"""Request dispatch: request code -> handler, with errors turned into error responses.

A handler takes ``(request, connection)`` and returns a response :class:`Command`, ``None``
(nothing to send, e.g. for oneway requests) or an awaitable of either. Synchronous
handlers answer inline with no task per request, which keeps the hot paths cheap; a
handler returns an awaitable only when it has to wait (long polling, sync flush).

A handler that raises :class:`~pymq.errors.RemoteError` answers with that error's code and
message; any other exception answers SYSTEM_ERROR with the reason and is logged.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pymq.errors import LocalProtocolError, RemoteError
from pymq.logs import get_logger
from pymq.protocol.codes import ResponseCode
from pymq.protocol.frame import Command

if TYPE_CHECKING:
    from pymq.transport.connection import Connection

HandlerResult = Command | None | Awaitable[Command | None]
Handler = Callable[[Command, "Connection"], HandlerResult]

log = get_logger("transport.dispatch")


class Dispatcher:
    """Routes incoming requests to handlers and writes their responses."""

    def __init__(self, handlers: dict[int, Handler] | None = None, *, name: str = "rpc") -> None:
        self._handlers: dict[int, Handler] = dict(handlers or {})
        self._tasks: set[asyncio.Task[None]] = set()
        self.name = name
        #: called as hook(code, ok, seconds) after each request (metrics); None to skip
        self.observer: Callable[[int, int, float], None] | None = None

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler

    def register_many(self, handlers: dict[int, Handler]) -> None:
        for code, handler in handlers.items():
            self.register(code, handler)

    @property
    def codes(self) -> list[int]:
        return sorted(self._handlers)

    def dispatch(self, conn: Connection, cmd: Command) -> None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            if not cmd.is_oneway:
                conn.write_command(
                    cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported")
                )
            return
        # -1: no observer when the request came in, so none is told about it later either.
        started = asyncio.get_running_loop().time() if self.observer is not None else -1.0
        try:
            result = handler(cmd, conn)
        except Exception as exc:
            self._answer_error(conn, cmd, exc, started)
            return
        if result is None or isinstance(result, Command):
            self._answer(conn, cmd, result, started)
        elif inspect.isawaitable(result):
            task = asyncio.ensure_future(self._finish(conn, cmd, result, started))
            self._tasks.add(task)
            conn.inflight += 1
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _t: conn.handler_finished())
        else:  # pragma: no cover - programming error in a handler
            self._answer_error(conn, cmd, TypeError(f"handler returned {type(result).__name__}"), started)

    async def _finish(self, conn: Connection, cmd: Command, aw: Awaitable[Command | None], started: float) -> None:
        try:
            result = await aw
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._answer_error(conn, cmd, exc, started)
            return
        self._answer(conn, cmd, result, started)

    def _answer(self, conn: Connection, cmd: Command, result: Command | None, started: float) -> None:
        if result is not None and not cmd.is_oneway:
            result.opaque = cmd.opaque
            try:
                conn.write_command(result)
            except LocalProtocolError as exc:
                self._answer_error(conn, cmd, exc, started)
                return
        if self.observer is not None and started >= 0:
            ok = result is None or result.code == 0
            self.observer(cmd.code, int(ok), asyncio.get_running_loop().time() - started)

    def _answer_error(self, conn: Connection, cmd: Command, exc: Exception, started: float) -> None:
        if isinstance(exc, RemoteError):
            code, remark = exc.code, exc.remark
            log.info("request_rejected", code=cmd.code, peer=conn.remote_addr, response=code, reason=remark)
        else:
            code, remark = ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
            log.error("handler_failed", code=cmd.code, peer=conn.remote_addr, exc_info=exc)
        if not cmd.is_oneway:
            conn.write_command(cmd.response(code, remark))
        if self.observer is not None and started >= 0:
            self.observer(cmd.code, 0, asyncio.get_running_loop().time() - started)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` for running handlers, then cancel the rest."""
        if self._tasks:
            _done, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
