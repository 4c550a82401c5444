"""Request dispatch: request code -> interceptors and handler, with errors turned into error responses.

A handler takes ``(request, channel)`` (a :class:`~pymq.transport.channel.Channel`, never a
connection or a codec) and returns a response :class:`Command`, ``None`` (nothing to send,
e.g. for oneway requests) or an awaitable of either. Synchronous handlers answer inline
with no task per request, which keeps the hot paths cheap; a handler returns an awaitable
only when it has to wait (long polling, sync flush).

Around the handler run the :class:`~pymq.transport.interceptor.Interceptor` chains of its
code: ``before`` hooks may answer instead of it, ``after`` hooks see every answer. The
chains are built per code when handlers or interceptors change, so a request pays one dict
lookup for handler and chains together, and nothing for hooks that do not apply to it.

A handler that raises :class:`~pymq.errors.RemoteError` answers with that error's code and
message; any other exception answers SYSTEM_ERROR with the reason and is logged.

A handler that waits on something outside itself (a held long-polling pull) returns its
awaitable wrapped in :class:`Parked`: it is counted in the channel's ``parked``, not in
``inflight``, so it does not take one of the connection's handler slots (issue 36). Past
``max_parked`` such waits on one channel, the next is refused with SYSTEM_BUSY: what a held
request costs stays bounded per connection.

A handler whose answer another event gives (a SYNC_MASTER send its slave's ACK releases)
returns a :class:`Deferred`: the answer is written when that event gives it, from the
event's own call, with no future, task or loop pass per request.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Generator
from functools import partial
from typing import Any

from pymq.errors import LocalProtocolError, RemoteError
from pymq.logs import get_logger
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import FLAG_ONEWAY, Command
from pymq.transport.channel import Channel, ServerChannel
from pymq.transport.interceptor import Interceptor


class Parked:
    """A handler's answer that waits for an event, not for work: no handler slot while it waits.

    Awaitable like what it wraps (so a caller of the handler may await it directly).
    """

    __slots__ = ("aw",)

    def __init__(self, aw: Awaitable[Command | None]) -> None:
        self.aw = aw

    def __await__(self) -> Generator[Any, None, Command | None]:
        return self.aw.__await__()


class Deferred:
    """A handler's answer that a later event gives: :meth:`set_result` (or :meth:`set_exception`,
    or :meth:`cancel`: no answer) writes it at once, from the giver's call.

    What a future would do with less: no done callback scheduled on the loop, no task. Like a
    task it holds one of the connection's handler slots until given. The first outcome counts;
    later ones are ignored.
    """

    __slots__ = ("_answer", "_done", "_error", "_then")

    def __init__(self) -> None:
        self._done = False
        self._answer: Command | None = None
        self._error: BaseException | None = None
        #: the dispatcher's continuation, once it took the request
        self._then: Callable[[Command | None, BaseException | None], None] | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, answer: Command | None) -> None:
        self._give(answer, None)

    def set_exception(self, error: BaseException) -> None:
        self._give(None, error)

    def cancel(self) -> None:
        self._give(None, asyncio.CancelledError())

    def then(self, fn: Callable[[Command | None, BaseException | None], None]) -> None:
        """Call ``fn(answer, error)`` when the outcome is given (at once if it was); one taker only."""
        if self._then is not None:
            raise RuntimeError("a Deferred has one taker")
        if self._done:
            fn(self._answer, self._error)
        else:
            self._then = fn

    def __await__(self) -> Generator[Any, None, Command | None]:
        """Await the outcome (a future made for the awaiter: the hot paths use :meth:`then`)."""
        if not self._done:
            fut: asyncio.Future[Command | None] = asyncio.get_running_loop().create_future()

            def settle(answer: Command | None, error: BaseException | None) -> None:
                if fut.done():
                    return
                if error is None:
                    fut.set_result(answer)
                elif isinstance(error, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(error)

            self.then(settle)
            return (yield from fut)
        if self._error is not None:
            raise self._error
        return self._answer

    def _give(self, answer: Command | None, error: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        then, self._then = self._then, None
        if then is None:
            self._answer, self._error = answer, error
        else:
            then(answer, error)


HandlerResult = Command | None | Awaitable[Command | None] | Parked | Deferred
Handler = Callable[[Command, Channel], HandlerResult]
Before = Callable[[Command, Channel], Command | None]
After = Callable[[Command, Channel, Command | None, float], None]
#: one request code's handler with its before and after chains
Route = tuple[Handler, tuple[Before, ...], tuple[After, ...]]

log = get_logger("transport.dispatch")


class Dispatcher:
    """Routes incoming requests through interceptors to handlers and writes their responses."""

    def __init__(self, handlers: dict[int, Handler] | None = None, *, name: str = "rpc") -> None:
        self._handlers: dict[int, Handler] = {int(c): h for c, h in (handlers or {}).items()}
        self._interceptors: list[Interceptor] = []
        self._routes: dict[int, Route] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: futures handlers returned, answered from their done callbacks (no task each)
        self._futures: set[asyncio.Future[Command | None]] = set()
        #: Deferred answers not given yet
        self._deferred: set[Deferred] = set()
        self.name = name
        #: the remark of a REQUEST_CODE_NOT_SUPPORTED answer for a code (None: the generic one);
        #: a broker uses it to say that a nameserver request reached a broker
        self.unsupported_remark: Callable[[int], str | None] | None = None
        self._rebuild()

    # --- registration (rare: builds the per-code chains) ----------------------------------------

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler
        self._rebuild()

    def register_many(self, handlers: dict[int, Handler]) -> None:
        for code, handler in handlers.items():
            self._handlers[int(code)] = handler
        self._rebuild()

    def add_interceptor(self, interceptor: Interceptor) -> None:
        """Append ``interceptor`` to the chains of the codes it applies to (runs after earlier ones)."""
        self._interceptors.append(interceptor)
        self._rebuild()

    def move_first(self, interceptor: Interceptor) -> None:
        """Run ``interceptor`` before the others (an access check before a role gate)."""
        if interceptor in self._interceptors:
            self._interceptors.remove(interceptor)
            self._interceptors.insert(0, interceptor)
            self._rebuild()

    def remove_interceptor(self, interceptor: Interceptor) -> None:
        if interceptor in self._interceptors:
            self._interceptors.remove(interceptor)
            self._rebuild()

    @property
    def interceptors(self) -> tuple[Interceptor, ...]:
        return tuple(self._interceptors)

    @property
    def codes(self) -> list[int]:
        return sorted(self._handlers)

    def _rebuild(self) -> None:
        routes: dict[int, Route] = {}
        for code, handler in self._handlers.items():
            chain = [i for i in self._interceptors if i.applies_to(code)]
            routes[code] = (
                handler,
                tuple(i.before for i in chain if i.has_before),
                tuple(i.after for i in chain if i.has_after),
            )
        self._routes = routes
        for i in self._interceptors:
            i.attached([c for c in sorted(routes) if i.applies_to(c)])

    # --- per request (hot) ------------------------------------------------------------------------

    def dispatch(self, channel: ServerChannel, cmd: Command) -> None:
        route = self._routes.get(cmd.code)
        if route is None:
            if not cmd.is_oneway:
                remark = self.unsupported_remark(cmd.code) if self.unsupported_remark is not None else None
                channel.write_command(
                    cmd.response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark or f"request code {cmd.code} not supported"
                    )
                )
            return
        handler, befores, afters = route
        # Only timed when someone listens (the chains are fixed for this request).
        started = asyncio.get_running_loop().time() if afters else 0.0
        try:
            result: HandlerResult = None
            if befores:
                for before in befores:
                    result = before(cmd, channel)
                    if result is not None:
                        break
            if result is None:
                result = handler(cmd, channel)
        except Exception as exc:
            self._answer_error(channel, cmd, exc, started, afters)
            return
        if result.__class__ is Command:  # the usual inline answer: _answer's work, one call less
            if not cmd.flags & FLAG_ONEWAY:
                result.opaque = cmd.opaque
                try:
                    channel.write_command(result)
                except LocalProtocolError as exc:
                    self._answer_error(channel, cmd, exc, started, afters)
                    return
            if afters:
                seconds = asyncio.get_running_loop().time() - started
                for after in afters:
                    after(cmd, channel, result, seconds)
        elif isinstance(result, Deferred):
            self._deferred.add(result)
            channel.inflight += 1
            result.then(partial(self._given, channel, cmd, started, afters, result))
        elif result is None or isinstance(result, Command):
            self._answer(channel, cmd, result, started, afters)
        elif result.__class__ is Parked:
            self._park(channel, cmd, result.aw, started, afters)
        elif isinstance(result, asyncio.Future):
            # A plain future (e.g. a SYNC_FLUSH group commit): answered from its done callback.
            self._futures.add(result)
            channel.inflight += 1
            result.add_done_callback(lambda f: self._future_done(channel, cmd, f, started, afters))
        elif inspect.isawaitable(result):
            task = asyncio.ensure_future(self._finish(channel, cmd, result, started, afters))
            self._tasks.add(task)
            channel.inflight += 1
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _t: channel.handler_finished())
        else:  # pragma: no cover - programming error in a handler
            self._answer_error(channel, cmd, TypeError(f"handler returned {type(result).__name__}"), started, afters)

    def _park(
        self,
        channel: ServerChannel,
        cmd: Command,
        aw: Awaitable[Command | None],
        started: float,
        afters: tuple[After, ...],
    ) -> None:
        if channel.parked >= channel.max_parked:
            if inspect.iscoroutine(aw):
                aw.close()  # never started: nothing to clean up
            busy = RemoteError(
                ResponseCode.SYSTEM_BUSY, f"too many held requests on this connection ({channel.parked})"
            )
            self._answer_error(channel, cmd, busy, started, afters)
            return
        task = asyncio.ensure_future(self._finish(channel, cmd, aw, started, afters))
        self._tasks.add(task)
        channel.parked += 1
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: channel.unparked())

    async def _finish(
        self,
        channel: ServerChannel,
        cmd: Command,
        aw: Awaitable[Command | None],
        started: float,
        afters: tuple[After, ...],
    ) -> None:
        try:
            result = await aw
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._answer_error(channel, cmd, exc, started, afters)
            return
        self._answer(channel, cmd, result, started, afters)

    def _future_done(
        self,
        channel: ServerChannel,
        cmd: Command,
        fut: asyncio.Future[Command | None],
        started: float,
        afters: tuple[After, ...],
    ) -> None:
        self._futures.discard(fut)
        try:
            if not fut.cancelled():
                exc = fut.exception()
                if exc is None:
                    self._answer(channel, cmd, fut.result(), started, afters)
                elif isinstance(exc, Exception):
                    self._answer_error(channel, cmd, exc, started, afters)
        finally:
            channel.handler_finished()

    def _given(
        self,
        channel: ServerChannel,
        cmd: Command,
        started: float,
        afters: tuple[After, ...],
        deferred: Deferred,
        answer: Command | None,
        error: BaseException | None,
    ) -> None:
        """A :class:`Deferred`'s outcome: answer (nothing when cancelled), and free its slot."""
        self._deferred.discard(deferred)
        try:
            if error is None:
                self._answer(channel, cmd, answer, started, afters)
            elif isinstance(error, Exception):
                self._answer_error(channel, cmd, error, started, afters)
        finally:
            channel.handler_finished()

    def _answer(
        self,
        channel: ServerChannel,
        cmd: Command,
        result: Command | None,
        started: float,
        afters: tuple[After, ...],
    ) -> None:
        if result is not None and not cmd.is_oneway:
            result.opaque = cmd.opaque
            try:
                channel.write_command(result)
            except LocalProtocolError as exc:
                self._answer_error(channel, cmd, exc, started, afters)
                return
        if afters:
            seconds = asyncio.get_running_loop().time() - started
            for after in afters:
                after(cmd, channel, result, seconds)

    def _answer_error(
        self,
        channel: ServerChannel,
        cmd: Command,
        exc: Exception,
        started: float,
        afters: tuple[After, ...],
    ) -> None:
        if isinstance(exc, RemoteError):
            code, remark = exc.code, exc.remark
            log.info("request_rejected", code=cmd.code, peer=channel.remote_addr, response=code, reason=remark)
        else:
            code, remark = ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
            log.error("handler_failed", code=cmd.code, peer=channel.remote_addr, exc_info=exc)
        response = cmd.response(code, remark)
        if not cmd.is_oneway:
            channel.write_command(response)
        if afters:
            seconds = asyncio.get_running_loop().time() - started
            for after in afters:
                after(cmd, channel, response, seconds)

    @property
    def in_flight(self) -> int:
        return len(self._tasks) + len(self._futures) + len(self._deferred)

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` for running handlers, then cancel the rest."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._deferred and loop.time() < deadline:  # (no future to wait on: shutdown only)
            await asyncio.sleep(0.01)
        for deferred in list(self._deferred):
            deferred.cancel()
        timeout = max(0.0, deadline - loop.time())
        if self._tasks or self._futures:
            _done, pending = await asyncio.wait(set(self._tasks) | set(self._futures), timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
