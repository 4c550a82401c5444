"""The master's side of the HA link: a listener of its own, one stream per slave.

A slave connects and says where it stands (HELLO: its commitlog end and epoch list); the
master runs the epoch check (:func:`pymq.broker.ha.epochs.decide_join`), answers JOIN
(stream, truncate first, or refuse: logged as ``slave_refused`` with the reason) and then
streams its commitlog from the agreed offset: slices of the mapped files
(:meth:`MessageStore.read_commitlog`) written behind a 20-byte header, batch after batch,
with a heartbeat when there is nothing new. Nothing is parsed per message on this side.
The slave's ACKs move its acked offset, which resolves SYNC_MASTER sends
(:mod:`pymq.broker.ha.acks`) and keeps it in the sync-state set
(:mod:`pymq.broker.ha.sync_state`: each time a stream has sent everything the master holds it
records a catch-up mark; a watch task shrinks the set as time passes). ``on_sync_change`` is
called whenever the set changes (controller mode reports it at once).

The listener takes an optional ``ssl.SSLContext`` (TLS on the HA link).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as ssl_module
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.broker.ha import codec
from pymq.broker.ha.acks import PENDING, REPLICATED, AckWaiters, SlaveState, Waiter
from pymq.broker.ha.auth import Authenticate, hello_request
from pymq.broker.ha.epochs import crc_of, decide_join
from pymq.config import BrokerRole
from pymq.errors import ProtocolError
from pymq.logs import get_logger
from pymq.tasks import wait_within

if TYPE_CHECKING:
    from pymq.broker.ha.epoch_file import EpochFile
    from pymq.broker.role.state import RoleMachine
    from pymq.broker.store import MessageStore
    from pymq.config import BrokerConfig

log = get_logger("broker.ha.master")

#: how long a new connection may take to send its HELLO
HELLO_TIMEOUT = 10.0
#: an ASYNC_MASTER's stream gathers this long after new data before it sends: fewer, larger frames
#: cost both sides less (8 producers, replication_bench.py, alternated four times: ASYNC_MASTER at
#: 0.78-0.90 of no slave with 4 ms against 0.67-0.79 with 1 ms, the slave 5.4-7.4 against 6.4-8.6
#: CPU us/msg). RocketMQ's HA writer, once caught up, waits up to 100 ms for more.
ASYNC_BATCH_SECONDS = 0.004
#: the transport buffers this much before a stream waits for the socket to drain
WRITE_HIGH_WATER = 4 * 1024 * 1024


class HAMaster:
    """Serves slaves their master's commitlog; ``wait_replicated`` is the SYNC_MASTER seam."""

    def __init__(
        self,
        store: MessageStore,
        epochs: EpochFile,
        config: BrokerConfig,
        *,
        host: str,
        port: int,
        advertised_host: str,
        ssl: ssl_module.SSLContext | None = None,
        authenticate: Authenticate | None = None,
        role: RoleMachine,
    ) -> None:
        self.store = store
        #: the broker's role: a SYNC_MASTER's frames ask for an ACK at once
        self.role = role
        #: ACL on: every slave's HELLO must be signed by an admin account (see broker.ha.auth)
        self.authenticate = authenticate
        self.epochs = epochs
        self.config = config
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.ssl = ssl
        self.acks = AckWaiters(
            config.in_sync_replicas,
            config.ha_max_lag_bytes,
            config.ha_max_time_slave_not_catchup_seconds,
            config.controller_mode,
        )
        #: called when the sync-state set changes
        self.on_sync_change: Callable[[], None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self.address = ""
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_id = 0
        #: the streams that have sent everything and wait for new data: the arrival hook's
        #: push sends it for them (their tasks stay asleep)
        self._live: list[_LiveStream] = []
        self._push_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._listening = False

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def link() -> _LinkProtocol:
            return _LinkProtocol(asyncio.StreamReader(limit=codec.MAX_FRAME, loop=loop), self._serve, loop=loop)

        self._server = await loop.create_server(link, self.host, self.port, ssl=self.ssl)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"{self.advertised_host}:{port}"
        self._listening = True
        self.store.add_arrival_listener(self.on_arrival)
        self._watch = asyncio.create_task(self._watch_sync(), name="ha-sync-state-watch")
        log.info("ha_listening", address=self.address, epoch=self.epochs.epoch)

    async def stop(self) -> None:
        self._listening = False
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self.acks.slaves.clear()
        self.acks.fail_all()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.store.remove_arrival_listener(self.on_arrival)

    # --- the store's side -----------------------------------------------------------------------------------

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival hook: push the new bytes to the caught-up streams once per loop tick
        (one list test when none waits).

        A SYNC_MASTER pushes on the next tick (the requests read in this one are stored by then,
        so one frame carries them all); an ASYNC_MASTER after ASYNC_BATCH_SECONDS (fewer, larger
        frames; no send waits for them).
        """
        if self._live and not self._push_scheduled:
            self._push_scheduled = True
            loop = asyncio.get_running_loop()
            if self.role.current.flavour is BrokerRole.SYNC_MASTER:
                loop.call_soon(self._push)
            else:
                loop.call_later(ASYNC_BATCH_SECONDS, self._push)

    def _push(self) -> None:
        """Send what is new to every caught-up stream from here, with no task switch per frame;
        a stream whose socket is backed up is woken to drain it."""
        self._push_scheduled = False
        live = self._live
        if not live:
            return
        end = self.store.max_phy_offset
        sync = self.role.current.flavour is BrokerRole.SYNC_MASTER
        now = time.monotonic()
        self._live = [stream for stream in live if self._push_to(stream, end, sync, now)]

    def _push_to(self, stream: _LiveStream, end: int, sync: bool, now: float) -> bool:
        """Push ``stream`` up to ``end``; False when its task must take over (drain, or a failure)."""
        if stream.pos >= end:
            return True
        try:
            stream.pos = self._send(stream.transport, stream.pos, end, codec.ACK_NOW if sync else 0)
        except ProtocolError as exc:
            stream.wake(exc)
            return False
        if stream.pos >= end:
            self.acks.sent(stream.state, end, now)
        if stream.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
            stream.wake(None)  # its task drains the socket, then streams on
            return False
        return True

    def _acked(self, stream: _LiveStream, offset: int) -> None:
        """The slave of ``stream`` holds ``offset``: resolve the sends it completes."""
        self._changed(self.acks.ack(stream.state, offset, self.store.max_phy_offset, time.monotonic()))

    def _send(self, transport: asyncio.WriteTransport, pos: int, end: int, flags: int) -> int:
        """Write the commitlog from ``pos`` (up to ``ha_batch_bytes``, towards ``end``); returns the new position."""
        views = self.store.read_commitlog(pos, self.config.ha_batch_bytes)
        if not views:
            raise ProtocolError(f"the commitlog at {pos} is gone (cleanup): the slave must start over")
        for view in views:
            # One send per slice: header and bytes together.
            transport.writelines((codec.data_header(pos, end, len(view), flags), view))
            pos += len(view)
        return pos

    def wait_replicated(self, end: int, waiter: Waiter) -> int | None:
        """For a send ending at ``end``: None when no slave is in sync, REPLICATED when the slaves
        hold it already, else PENDING: ``waiter.set_result(REPLICATED or TIMED_OUT)`` comes later."""
        acks = self.acks
        if not acks.can_wait():
            return None
        # (a send just stored is normally past every slave: no need to work out the replicated offset)
        if end <= acks.top and acks.replicated_offset() >= end:
            acks.acknowledged(end)
            return REPLICATED
        deadline = time.monotonic() + self.config.slave_ack_timeout_ms / 1000
        acks.add(end, deadline, waiter)
        if self._timer is None:
            self._arm(deadline)
        return PENDING

    def _arm(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + max(0.0, deadline - time.monotonic()), self._expire)

    def _expire(self) -> None:
        self._timer = None
        nxt = self.acks.expire(time.monotonic())
        if nxt is not None:
            self._arm(nxt)

    # --- the sync-state set -------------------------------------------------------------------------------------

    async def _watch_sync(self) -> None:
        """A slave that stops catching up leaves the set after the window, with no ACK to notice it."""
        interval = min(1.0, max(0.05, self.acks.window / 4))
        while True:
            await asyncio.sleep(interval)
            self._changed(self.acks.refresh(self.store.max_phy_offset, time.monotonic()))

    def _changed(self, changed: bool) -> None:
        if not changed:
            return
        log.info("sync_state_set_changed", members=self.acks.sync.reported())
        if self.acks.waiting:
            self.acks.advance(self.store.max_phy_offset)
        if self.on_sync_change is not None:
            self.on_sync_change()

    def confirm_sync_set(self, controller_set: list[str]) -> None:
        """The controller's answer: its sync-state set (slaves) for this master."""
        self.acks.confirm(controller_set, self.store.max_phy_offset)

    # --- info -----------------------------------------------------------------------------------------------

    def slave_info(self) -> list[dict[str, object]]:
        master_max = self.store.max_phy_offset
        members = self.acks.sync.members
        return [
            {
                "address": s.address,
                "brokerId": s.broker_id,
                "ackOffset": s.acked,
                "lagBytes": max(0, master_max - s.acked),
                "inSync": s.address in members,
            }
            for s in self.acks.slaves.values()
        ]

    # --- one slave ------------------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peername")
        link_id = self._next_id
        self._next_id += 1
        try:
            await self._run_link(link_id, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.info("slave_link_closed", peer=str(peer), reason=str(exc) or type(exc).__name__)
        except ProtocolError as exc:
            log.warning("slave_link_broken", peer=str(peer), reason=str(exc))
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("slave_link_failed", peer=str(peer))
        finally:
            self._changed(self.acks.disconnect(link_id, self.store.max_phy_offset, time.monotonic()))
            self._tasks.discard(task)
            writer.close()

    async def _run_link(self, link_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = codec.FrameDecoder()
        hello = None
        hello_body: memoryview | None = None
        auth: dict[str, str | int] | None = None
        while hello is None:
            chunk = await wait_within(reader.read(65536), HELLO_TIMEOUT)
            if not chunk:
                return
            for kind, body in decoder.feed(chunk):
                if kind == codec.AUTH and auth is None and hello is None:
                    auth = codec.decode_auth(body)
                    continue
                if kind != codec.HELLO:
                    raise ProtocolError(f"HA link must open with HELLO, got frame kind {kind}")
                hello, hello_body = codec.decode_hello(body), body
        store = self.store
        if self.authenticate is not None:
            assert hello_body is not None
            peer = writer.get_extra_info("peername")
            peer_addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            reason = (
                "the HA link needs ACL credentials (no AUTH frame)"
                if auth is None
                else self.authenticate(hello_request(hello_body, auth), peer_addr)
            )
            if reason is not None:
                writer.write(
                    codec.encode_join(
                        codec.Join("refuse", 0, store.commitlog_file_size, [], f"not authorized: {reason}")
                    )
                )
                await writer.drain()
                log.warning("slave_not_authorized", slave=hello.address, peer=peer_addr, reason=reason)
                return
        tail_crcs = None
        tail_start = hello.max_offset - hello.tail_size
        if hello.tail_size and store.min_phy_offset <= tail_start and hello.max_offset <= store.max_phy_offset:
            tail_crcs = (hello.tail_crc, crc_of(store.read_commitlog(tail_start, hello.tail_size)))
        decision = decide_join(
            self.epochs.entries, store.min_phy_offset, store.max_phy_offset, hello.epochs, hello.max_offset, tail_crcs
        )
        join = codec.Join(
            decision.action, decision.offset, store.commitlog_file_size, list(self.epochs.entries), decision.reason
        )
        writer.write(codec.encode_join(join))
        await writer.drain()
        if decision.action == "refuse":
            log.error(
                "slave_refused",
                slave=hello.address,
                slave_max_offset=hello.max_offset,
                slave_epochs=[e.epoch for e in hello.epochs],
                reason=decision.reason,
            )
            return
        log.info(
            "slave_joined",
            slave=hello.address,
            broker_id=hello.broker_id,
            action=decision.action,
            offset=decision.offset,
            reason=decision.reason,
        )
        now = time.monotonic()
        state = SlaveState(hello.address, hello.broker_id, decision.offset, now, now)
        self._changed(self.acks.connect(link_id, state, store.max_phy_offset, now))
        writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        stream = _LiveStream(decision.offset, writer.transport, state)
        ended = self._read_acks(writer, decoder, stream)
        try:
            await self._stream(writer, stream, ended)
        finally:
            link = writer.transport.get_protocol()
            if isinstance(link, _LinkProtocol):  # (nothing more from this link counts)
                link.on_data = link.on_close = None

    def _read_acks(
        self, writer: asyncio.StreamWriter, decoder: codec.FrameDecoder, stream: _LiveStream
    ) -> asyncio.Future[Exception | None]:
        """From now on the link's bytes are the slave's ACKs, handled as they arrive (in the
        protocol's ``data_received``: no task to wake per ACK, and the answers they release and
        the next frame go out in the same loop pass). The future ends with the link: None when
        the slave closed it, else what went wrong."""
        link = writer.transport.get_protocol()
        assert isinstance(link, _LinkProtocol)
        ended: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

        def end(failure: Exception | None) -> None:
            link.on_data = link.on_close = None
            if not ended.done():
                ended.set_result(failure)

        def on_data(data: bytes) -> None:
            try:
                offset = -1
                for kind, body in decoder.feed(data):
                    if kind != codec.ACK:
                        raise ProtocolError(f"a slave sends only ACKs after HELLO, got frame kind {kind}")
                    offset = max(offset, codec.decode_ack(body))
                if offset >= 0:
                    self._acked(stream, offset)
            except Exception as exc:  # (a protocol callback must not raise: the link ends with it)
                end(exc)
                writer.transport.close()

        link.on_data, link.on_close = on_data, end
        return ended

    async def _stream(
        self, writer: asyncio.StreamWriter, stream: _LiveStream, ended: asyncio.Future[Exception | None]
    ) -> None:
        """Send the commitlog from ``stream.pos`` on until the link ends (``ended``: raises what
        ended it); a slave that stops reading or acking for 3 heartbeats + 5 s is dropped (it is
        no longer counted in sync).

        The task catches up (everything there is, in batches, draining the socket as it goes);
        once it has sent everything it joins the live streams and sleeps: the arrival hook's
        push (:meth:`_push`) and the ACKs (:meth:`_acked`) send new bytes from then on, so a
        busy master pays no task switch, timer or wait set per frame. It wakes for the
        heartbeat, when the slave goes, or when a push finds the socket backed up.
        """
        store = self.store
        state = stream.state
        loop = asyncio.get_running_loop()
        transport = writer.transport
        heartbeat = self.config.ha_heartbeat_seconds
        silent = heartbeat * 3 + 5.0

        def wake_on_close(_: object) -> None:
            stream.wake(None)

        ended.add_done_callback(wake_on_close)
        try:
            while not ended.done():
                end = store.max_phy_offset
                if stream.pos < end:
                    flags = codec.ACK_NOW if self.role.current.flavour is BrokerRole.SYNC_MASTER else 0
                    stream.pos = self._send(transport, stream.pos, end, flags)
                    if stream.pos >= end:
                        self.acks.sent(state, end, time.monotonic())  # a catch-up mark: all the master had
                    if transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                        await wait_within(writer.drain(), silent)
                    continue
                stream.sleeping = sleeping = loop.create_future()
                self._live.append(stream)
                timer = loop.call_later(heartbeat, _resolve, sleeping, True)
                try:
                    timed_out = await sleeping
                finally:
                    timer.cancel()
                    stream.sleeping = None
                    if stream in self._live:
                        self._live.remove(stream)
                if stream.failure is not None:
                    raise stream.failure
                if timed_out:
                    if time.monotonic() - state.last_ack_at > silent:
                        raise TimeoutError(f"no ACK from the slave for {silent:.0f}s")
                    writer.write(codec.data_header(stream.pos, store.max_phy_offset, 0))
                    if stream.pos >= store.max_phy_offset:
                        self.acks.sent(state, stream.pos, time.monotonic())
                await wait_within(writer.drain(), silent)
        finally:
            if stream in self._live:
                self._live.remove(stream)
        failure = ended.result()
        if failure is not None:
            raise failure


class _LiveStream:
    """One slave's stream as the push sees it: where it is, and the task's sleep to end."""

    __slots__ = ("failure", "pos", "sleeping", "state", "transport")

    def __init__(self, pos: int, transport: asyncio.WriteTransport, state: SlaveState) -> None:
        self.pos = pos
        self.transport = transport
        self.state = state
        self.sleeping: asyncio.Future[bool] | None = None
        #: what the push ran into (the task raises it)
        self.failure: Exception | None = None

    def wake(self, failure: Exception | None) -> None:
        """End the task's sleep (it streams on, drains, or raises ``failure``)."""
        if failure is not None:
            self.failure = failure
        if self.sleeping is not None and not self.sleeping.done():
            self.sleeping.set_result(False)


def _resolve(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


class _LinkProtocol(asyncio.StreamReaderProtocol):
    """The HA link's protocol: a StreamReaderProtocol (the HELLO is read from its reader, the
    writer's ``drain`` is its flow control) whose bytes, once the link streams, go straight to
    ``on_data``, and whose end is reported to ``on_close`` (None: the slave closed the link)."""

    on_data: Callable[[bytes], None] | None = None
    on_close: Callable[[Exception | None], None] | None = None

    def data_received(self, data: bytes) -> None:
        if self.on_data is None:
            super().data_received(data)
        else:
            self.on_data(data)

    def eof_received(self) -> bool | None:
        if self.on_close is not None:
            self.on_close(None)
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.on_close is not None:
            self.on_close(exc)
        super().connection_lost(exc)
