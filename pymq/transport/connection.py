"""One TCP connection carrying commands in both directions, in whatever wire format its codec speaks.

The same protocol class serves both ends: a connection can send requests and match their
responses by opaque, and hand incoming requests to a dispatcher (the server's handlers,
or a client's handlers for requests the server pushes, e.g. NOTIFY_CONSUMER_IDS_CHANGED).
It is the :class:`~pymq.transport.channel.Channel` those handlers see.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from pymq.errors import ConnectionClosedError, ProtocolError, RequestTimeoutError
from pymq.logs import get_logger
from pymq.protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, Buffer, Command
from pymq.transport.channel import RequestSink
from pymq.transport.codec import Codec, Decoder
from pymq.transport.flow_control import FlowControl
from pymq.transport.limits import ConnectionLimits, monotonic
from pymq.transport.tls_writes import JoinedWrites

log = get_logger("transport")

_opaques = itertools.count(1)

#: Handlers still running for one connection above which its further requests wait.
MAX_INFLIGHT_HANDLERS = 1024
#: Requests waiting for a handler slot above which the connection stops reading.
MAX_BACKLOG = 1024
#: Held requests (long-polling pulls, waits for arrivals) one connection may have parked: they
#: take no handler slot (issue 36); past this the next is refused with SYSTEM_BUSY.
MAX_PARKED = 65_536

#: Output buffered above this pauses the writer (server: stops reading that peer).
WRITE_HIGH_WATER = 4 * 1024 * 1024
WRITE_LOW_WATER = 1024 * 1024

#: Queued output above which a write goes out at once instead of with the rest of the tick.
COALESCE_MAX_BYTES = 64 * 1024

#: Longest wait of the request-timeout timer: answered requests' deadlines are dropped this often.
_SWEEP_INTERVAL = 1.0


class Connection(asyncio.Protocol):
    """Bytes in, commands out (through ``codec``); requests matched to responses by opaque."""

    def __init__(
        self,
        dispatcher: RequestSink | None,
        codec: Codec,
        *,
        server_side: bool = False,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.server_side = server_side
        #: the server's limits (idle and frame timeouts, partial-frame budget); None: none (clients)
        self.limits = limits
        #: when bytes last arrived (monotonic; stamped only when there are limits)
        self.last_read = monotonic()
        #: bytes of the unfinished frame the decoder holds, and when that frame began
        self.partial_bytes = 0
        self.partial_since = 0.0
        self.decoder = codec.decoder()
        self._encode: Callable[[Command], Sequence[Buffer]] = codec.encode
        bind = getattr(self.decoder, "bind", None)
        if bind is not None:  # a decoder that may switch this connection's format (transport.sniffing)
            bind(self)
        self.transport: asyncio.Transport | None = None
        self.remote_addr = "?"
        self.local_addr = "?"
        self.flow: FlowControl | None = None
        self.closed = asyncio.get_running_loop().create_future()
        #: per-connection data for handlers (e.g. the client id that uses it)
        self.attrs: dict[str, Any] = {}
        self._pending: dict[int, asyncio.Future[Command]] = {}
        #: requests received while the peer is not reading our responses (flow control)
        self._backlog: deque[Command] = deque()
        #: handlers of this connection's requests that have not answered yet (set by the dispatcher)
        self.inflight = 0
        #: this connection's held requests, which take no handler slot (see dispatch.Parked)
        self.parked = 0
        self.max_parked = MAX_PARKED
        self._close_callbacks: list[Callable[[Connection], None]] = []
        #: signs each request this end sends (client credentials); None: unsigned
        self.signer: Callable[[Command], None] | None = None
        #: whether the connection is TLS (set when made; ACL sessions need it)
        self.tls = False
        #: whether the peer ever sent a byte (a silent close hints at a TLS/plaintext mismatch)
        self._got_data = False
        self._loop = asyncio.get_running_loop()
        #: encoded buffers waiting for this tick's one ``writelines`` (see :meth:`write_command`)
        self._out: list[Any] = []
        self._out_bytes = 0
        #: True while :meth:`data_received` runs its requests (their answers go out at its end)
        self._reading = False
        self._flush_scheduled = False
        #: request deadlines per timeout value, oldest first (see :meth:`_arm_timeouts`)
        self._deadlines: dict[float, deque[tuple[float, int]]] = {}
        self._timeout_timer: asyncio.TimerHandle | None = None
        self._timeout_at = 0.0

    def switch_protocol(
        self,
        name: str,
        decoder: Decoder,
        encode: Callable[[Command], Sequence[Buffer]],
        dispatcher: RequestSink | None,
    ) -> None:
        """Speak ``name`` from now on (its decoder, encoder and, unless None, dispatcher).

        Called once, by the sniffing decoder, before the first command is decoded.
        """
        self.decoder = decoder
        self._encode = encode
        if dispatcher is not None:
            self.dispatcher = dispatcher
        self.attrs["protocol"] = name

    # --- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop transports are not asyncio.Transport subclasses
        self.tls = transport.get_extra_info("ssl_object") is not None
        if self.tls:  # one TLS record per write, not per buffer of it (see transport.tls_writes)
            self.transport = transport = JoinedWrites(transport)  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        if peer:
            self.remote_addr = f"{peer[0]}:{peer[1]}"
        if local:
            self.local_addr = f"{local[0]}:{local[1]}"
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)  # type: ignore[attr-defined]
        self.flow = FlowControl(transport, pause_reading_when_blocked=self.server_side)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self._got_data = True
        try:
            commands = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("malformed_frame_closing_connection", peer=self.remote_addr, reason=str(exc))
            self.abort()
            return
        limits = self.limits
        if limits is not None:
            now = self.last_read = monotonic()
            held = self.decoder.buffered
            if (held != self.partial_bytes or (held and commands)) and self._track_partial(
                limits, held, now, bool(commands)
            ):
                return
        flow = self.flow
        dispatcher = self.dispatcher
        self._reading = True
        try:
            for cmd in commands:  # the loop inline (no call per read): this runs once per read
                if cmd.flags & FLAG_RESPONSE:
                    fut = self._pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                elif self._backlog or (flow is not None and flow.read_paused) or self.inflight >= MAX_INFLIGHT_HANDLERS:
                    # One read can carry many pipelined requests: past the high-water mark they
                    # wait here, so the responses we buffer stay bounded.
                    self._backlog.append(cmd)
                    if flow is not None and len(self._backlog) >= MAX_BACKLOG:
                        flow.backlog_full(True)
                elif dispatcher is not None:
                    dispatcher.dispatch(self, cmd)  # (what _dispatch does, one call less per request)
                else:
                    self._dispatch(cmd)
        finally:
            self._reading = False
            out = self._out
            if out:  # _write_out inline (once per read)
                self._out = []
                self._out_bytes = 0
                transport = self.transport
                if transport is not None and not transport.is_closing():
                    transport.writelines(out)

    def _track_partial(self, limits: ConnectionLimits, held: int, now: float, completed: bool) -> bool:
        """Count the unfinished frame in the server's budget; True if it was refused (connection closed)."""
        grew = held > self.partial_bytes
        if held and (not self.partial_bytes or completed):
            self.partial_since = now  # a new frame began in this read
        limits.partial_bytes += held - self.partial_bytes
        self.partial_bytes = held
        if grew and limits.over_budget(held):
            log.warning(
                "partial_frame_refused_closing_connection",
                peer=self.remote_addr,
                reason="bytes held in unfinished frames over the server's limit",
                frame_bytes_received=held,
                partial_bytes_total=limits.partial_bytes,
                limit=limits.max_partial_frame_bytes,
            )
            self.release_partial()
            self.abort()
            return True
        return False

    def release_partial(self) -> None:
        """Take this connection's unfinished frame out of the server's budget (closing)."""
        if self.limits is not None and self.partial_bytes:
            self.limits.partial_bytes -= self.partial_bytes
            self.partial_bytes = 0

    def _dispatch(self, cmd: Command) -> None:
        if self.dispatcher is not None:
            self.dispatcher.dispatch(self, cmd)
        elif not cmd.is_oneway:
            self.write_command(cmd.response(3, "this endpoint serves no requests"))

    def _run_backlog(self) -> None:
        flow = self.flow
        while self._backlog and not (flow is not None and flow.read_paused) and self.inflight < MAX_INFLIGHT_HANDLERS:
            self._dispatch(self._backlog.popleft())
        if flow is not None and len(self._backlog) < MAX_BACKLOG // 2:
            flow.backlog_full(False)

    def handler_finished(self) -> None:
        """An async handler of this connection answered (called by the dispatcher)."""
        self.inflight -= 1
        if self._backlog:
            self._run_backlog()

    def unparked(self) -> None:
        """A held request of this connection answered (called by the dispatcher)."""
        self.parked -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.release_partial()
        self._out = []
        if self._timeout_timer is not None:
            self._timeout_timer.cancel()
            self._timeout_timer = None
        self._deadlines.clear()
        self._backlog.clear()
        pending, self._pending = self._pending, {}
        if pending:
            why = f"connection to {self.remote_addr} closed" + self._silent_close_hint()
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosedError(why))
        if self.flow is not None:
            self.flow.connection_lost()
        if not self.closed.done():
            self.closed.set_result(None)
        for cb in self._close_callbacks:
            try:
                cb(self)
            except Exception:
                log.exception("close_callback_failed", peer=self.remote_addr)

    def _silent_close_hint(self) -> str:
        """Why a client's connection may have closed before the peer said a word."""
        if self._got_data or self.server_side:
            return ""
        return " before any answer (a TLS port reached without TLS, or a client certificate refused?)"

    def pause_writing(self) -> None:
        if self.flow is not None:
            self.flow.pause_writing()

    def resume_writing(self) -> None:
        if self.flow is not None:
            self.flow.resume_writing()
            if self._backlog:
                self._run_backlog()

    # --- sending -------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.closed.done() and not self.transport.is_closing()

    def add_close_callback(self, cb: Callable[[Connection], None]) -> None:
        self._close_callbacks.append(cb)

    def write_command(self, cmd: Command) -> None:
        """Write a command (responses, oneways); dropped if the connection is gone.

        Writes are coalesced: the answers to the requests of one read go out in one
        ``writelines`` at the end of :meth:`data_received`. On a client's connection, writes
        made elsewhere (tasks, callbacks) go out at once if nothing is queued, else with the
        rest of this loop tick's writes. On a server's, answers finished outside a read (a
        future's or a task's completion: a SYNC_MASTER send its slave's ACK released, a
        SYNC_FLUSH group commit, a woken long poll) are held for the next tick: the other
        answers the same event finished go out with them. One system call per tick instead
        of one per command is most of the cost of small requests. Order is kept: nothing
        overtakes a queued buffer.
        """
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._reading or self._flush_scheduled or self.server_side:
            parts = self._encode(cmd)
            self._out.extend(parts)
            self._out_bytes += sum(map(len, parts))
            if self._out_bytes >= COALESCE_MAX_BYTES:
                self._write_out()  # big answers go now: the transport's flow control must see them
            elif not (self._reading or self._flush_scheduled):
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
        else:
            # The first write of a tick goes straight out (no added latency); later writes of
            # the same tick queue behind it until the flush this schedules.
            transport.writelines(self._encode(cmd))
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out:
            self._write_out()

    def _write_out(self) -> None:
        out, self._out = self._out, []
        self._out_bytes = 0
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.writelines(out)

    async def _writable(self) -> None:
        """Wait for room in the output buffer; raise if the connection is (or gets) closed."""
        if self.is_open:
            flow = self.flow
            if flow is None or flow.writable:
                return
            await flow.drain()
            if self.is_open:
                return
        raise ConnectionClosedError(f"connection to {self.remote_addr} is closed{self._silent_close_hint()}")

    async def request(self, cmd: Command, timeout: float) -> Command:
        """Send a request and wait for its response."""
        fut = self.send_request(cmd, timeout)
        if fut is None:  # closed, or no room in the output buffer
            await self._writable()
            fut = self._start_request(cmd, timeout)
        try:
            return await fut
        finally:
            self._pending.pop(cmd.opaque, None)

    def send_request(self, cmd: Command, timeout: float) -> asyncio.Future[Command] | None:
        """Write a request now and return the future of its response (resolved with the response, or
        failed with RequestTimeoutError / ConnectionClosedError); None, and nothing written, when the
        connection is closed or its output buffer is full (:meth:`request` then waits for room).

        :meth:`request` without its coroutine, for hot paths (a producer's send): a caller that
        stops waiting for the future (e.g. is cancelled) must :meth:`abandon` ``cmd.opaque``.
        """
        flow = self.flow
        transport = self.transport
        if (  # not is_open, or no room: inline, this runs per request
            transport is None
            or self.closed.done()
            or transport.is_closing()
            or (flow is not None and not flow.writable)
        ):
            return None
        return self._start_request(cmd, timeout)

    def abandon(self, opaque: int) -> None:
        """Forget request ``opaque``: its caller no longer waits for the answer."""
        self._pending.pop(opaque, None)

    def _start_request(self, cmd: Command, timeout: float) -> asyncio.Future[Command]:
        opaque = next(_opaques)
        cmd.opaque = opaque
        cmd.flags &= ~FLAG_ONEWAY
        fut: asyncio.Future[Command] = self._loop.create_future()
        if self.signer is not None:
            self.signer(cmd)  # once, over the final code, opaque, fields and body
        self._pending[opaque] = fut
        # _add_deadline inline (once per request)
        loop = self._loop
        deadline = loop.time() + timeout
        group = round(timeout, 2)
        dq = self._deadlines.get(group)
        if dq is None:
            dq = self._deadlines[group] = deque()
        dq.append((deadline, opaque))
        if self._timeout_timer is None:
            self._arm_timeouts(min(deadline, loop.time() + _SWEEP_INTERVAL))
        elif deadline < self._timeout_at:
            self._timeout_timer.cancel()
            self._arm_timeouts(deadline)
        try:
            if self._reading or self._flush_scheduled:
                self.write_command(cmd)
            else:  # write_command's first write of a tick, inline (it runs per request)
                transport = self.transport
                assert transport is not None
                transport.writelines(self._encode(cmd))
                self._flush_scheduled = True
                loop.call_soon(self._flush)
        except BaseException:
            self._pending.pop(opaque, None)
            raise
        return fut

    # --- request timeouts: one timer per connection, not one per request ---------------------------

    def _add_deadline(self, opaque: int, timeout: float) -> None:
        """Remember when request ``opaque`` times out (:meth:`_start_request` does this inline).

        Deadlines of one timeout value arrive in order, so each value keeps a deque, oldest
        first; one timer (armed for the earliest deadline, at most a second ahead) expires
        what is due and drops the answered heads. A request costs a tuple, not a timer handle.
        Timeouts are grouped by their value in 10 ms steps: callers pass what is left of a
        budget (a float that differs on every call), and a deque per exact value would cost
        one deque per request. Within a group a deadline may fire up to 10 ms late.
        """
        deadline = self._loop.time() + timeout
        group = round(timeout, 2)
        dq = self._deadlines.get(group)
        if dq is None:
            dq = self._deadlines[group] = deque()
        dq.append((deadline, opaque))
        timer = self._timeout_timer
        if timer is None:
            self._arm_timeouts(min(deadline, self._loop.time() + _SWEEP_INTERVAL))
        elif deadline < self._timeout_at:
            timer.cancel()
            self._arm_timeouts(deadline)

    def _arm_timeouts(self, when: float) -> None:
        self._timeout_at = when
        self._timeout_timer = self._loop.call_at(when, self._expire_due)

    def _expire_due(self) -> None:
        self._timeout_timer = None
        now = self._loop.time()
        pending = self._pending
        earliest = now + _SWEEP_INTERVAL
        for timeout, dq in list(self._deadlines.items()):
            while dq:
                deadline, opaque = dq[0]
                fut = pending.get(opaque)
                if fut is None or fut.done():  # answered (or given up): forget it
                    dq.popleft()
                elif deadline <= now:
                    dq.popleft()
                    del pending[opaque]
                    fut.set_exception(RequestTimeoutError(f"no response from {self.remote_addr} within {timeout:.3f}s"))
                else:
                    earliest = min(earliest, deadline)
                    break
            if not dq:
                del self._deadlines[timeout]
        if self._deadlines:
            self._arm_timeouts(earliest)

    async def send_oneway(self, cmd: Command) -> None:
        await self._writable()
        cmd.opaque = next(_opaques)
        cmd.flags |= FLAG_ONEWAY
        if self.signer is not None:
            self.signer(cmd)
        self.write_command(cmd)

    def send_oneway_now(self, cmd: Command, *, share: bool = False) -> bool:
        """:meth:`send_oneway` without its coroutine: written if the connection is open and has
        room (True), else nothing written (False; the caller then awaits :meth:`send_oneway`).

        ``share``: held for this loop tick's one flush even when it is the tick's first write, so
        that what the caller writes next in the same tick goes out in the same system call (a
        producer's END_TRANSACTION and its next half message: the broker reads both at once,
        answers the half message first and commits after, while the producer works).
        """
        flow = self.flow
        transport = self.transport
        if (
            transport is None
            or self.closed.done()
            or transport.is_closing()
            or (flow is not None and not flow.writable)
        ):
            return False
        cmd.opaque = next(_opaques)
        cmd.flags |= FLAG_ONEWAY
        if self.signer is not None:
            self.signer(cmd)
        if share and not (self._reading or self._flush_scheduled):
            self._flush_scheduled = True  # (write_command queues behind the flush this schedules)
            self._loop.call_soon(self._flush)
        self.write_command(cmd)
        return True

    def push_oneway(self, cmd: Command) -> None:
        """Write a oneway request now, without waiting for flow control (server pushes)."""
        cmd.opaque = next(_opaques)
        cmd.flags |= FLAG_ONEWAY
        self.write_command(cmd)

    def close(self) -> None:
        if self.transport is not None:
            if self._out:
                self._write_out()
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    @property
    def in_flight(self) -> int:
        return len(self._pending)
