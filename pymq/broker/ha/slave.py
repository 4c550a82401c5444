"""The slave's side of the HA link: follow the master's commitlog into this store.

The slave finds its master's HA address (``ha_master_addr``, else the ``haAddress`` the
master's runtime info announces, asked at the master address the nameserver gave at
registration, or ``master_addr`` before that), sends HELLO (its commitlog end and epoch list), and does
what JOIN says: refuse (logged as ``replication_refused`` with the master's reason; it
tries again later, never mixes stores), truncate its tail to the last common point, or
just continue. It then takes the master's epoch list as its own and appends what DATA
frames bring with :meth:`MessageStore.append_raw` (whole records only: a record cut by a
frame waits for its rest), which builds consume queues and the index with the master's
dispatcher rules. It ACKs the offset it holds once the commitlog has the bytes (at once when
the master asks, else lazily), before the consume queues are built. All of that runs in the
link protocol's ``data_received`` (:class:`_SlaveLink`): no task wakes per frame.

The connector takes an optional ``ssl.SSLContext`` (TLS on the HA link).
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pymq.broker.ha import codec
from pymq.broker.ha.auth import Sign, sign_hello
from pymq.broker.ha.epochs import crc_of, tail_range
from pymq.errors import ProtocolError, PymqError, StoreError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.record_batch import whole_records_prefix
from pymq.tasks import cancel_and_wait, wait_within

if TYPE_CHECKING:
    from pymq.broker.ha.epoch_file import EpochFile
    from pymq.broker.role.state import RoleMachine
    from pymq.broker.store import MessageStore
    from pymq.config import BrokerConfig
    from pymq.transport.client import RpcClient

log = get_logger("broker.ha.slave")

#: wait this long before reconnecting after a failure (and 10x after a refusal)
RETRY_SECONDS = 1.0
#: how often the steady stream checks that its master is not silent
REARM_SECONDS = 1.0


class HASlave:
    """Replicates the master's commitlog; its fields are what runtime info and metrics report."""

    def __init__(
        self,
        store: MessageStore,
        epochs: EpochFile,
        config: BrokerConfig,
        *,
        rpc: RpcClient,
        address: Callable[[], str],
        discovered_master: Callable[[], str | None],
        ssl: ssl_module.SSLContext | None = None,
        sign: Sign | None = None,
        role: RoleMachine,
        ha_master_addr: str | None = None,
    ) -> None:
        self.store = store
        #: the broker's role: its id and the master it follows
        self.role = role
        #: the master's HA address as configured (only for the master the broker was configured with)
        self.ha_master_addr = ha_master_addr
        #: signs the HELLO when this broker has ACL credentials (a master with ACL on requires it)
        self.sign = sign
        self.epochs = epochs
        self.config = config
        self.rpc = rpc
        self.address = address
        self.discovered_master = discovered_master
        self.ssl = ssl
        #: the master's main and HA addresses once known
        self.master_addr: str | None = None
        self.master_ha_addr: str | None = None
        #: the master's commitlog end as of its last frame (lag = master_max - max offset here)
        self.master_max = 0
        self.connected = False
        self.last_frame_at = 0.0
        #: why the master refused this slave last (None: not refused)
        self.refused: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def offset(self) -> int:
        return self.store.max_phy_offset

    @property
    def lag_bytes(self) -> int:
        return max(0, self.master_max - self.offset)

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        self._task.set_name("broker-ha-slave")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self.connected = False

    async def _run(self) -> None:
        while True:
            pause = RETRY_SECONDS
            try:
                pause = await self._session()
            except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
                if self.connected:
                    log.warning("master_link_lost", master=self.master_ha_addr, reason=str(exc) or type(exc).__name__)
            except (ProtocolError, StoreError) as exc:
                log.error("replication_failed", master=self.master_ha_addr, reason=str(exc))
                pause = RETRY_SECONDS * 5
            except PymqError as exc:
                log.info("master_not_reachable", master=self.master_addr, reason=str(exc))
            except Exception:
                log.exception("replication_failed", master=self.master_ha_addr)
                pause = RETRY_SECONDS * 5
            finally:
                self.connected = False
            await asyncio.sleep(pause)

    async def resolve(self) -> str | None:
        """The master's HA address, or None if no master is known yet."""
        if self.ha_master_addr:
            self.master_ha_addr = self.ha_master_addr
            return self.ha_master_addr
        # The nameserver's answer is the group's current master (it follows role changes);
        # the configured address only until the first registration answered.
        main = self.discovered_master() or self.role.current.master_addr
        if not main:
            return None
        self.master_addr = main
        resp = await self.rpc.invoke_ok(main, Command.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=3.0)
        info: Any = decode_body(resp.body, "runtime info")
        ha = info.get("haAddress") if isinstance(info, dict) else None
        if not ha:
            raise PymqError(f"{main} announces no HA address (is it a master?)")
        self.master_ha_addr = str(ha)
        return self.master_ha_addr

    async def _session(self) -> float:
        """One connection to the master; returns how long to wait before the next."""
        ha = await self.resolve()
        if ha is None:
            return RETRY_SECONDS
        host, _, port = ha.rpartition(":")
        loop = asyncio.get_running_loop()
        transport, link = await wait_within(
            loop.create_connection(lambda: _SlaveLink(loop), host, int(port), ssl=self.ssl), 5.0
        )
        try:
            return await self._follow(link, ha)
        finally:
            transport.close()

    async def _follow(self, link: _SlaveLink, ha: str) -> float:
        store = self.store
        top = store.max_phy_offset
        tail_start, tail_size = tail_range(top, store.min_phy_offset)
        tail_crc = crc_of(store.read_commitlog(tail_start, tail_size))
        hello = codec.Hello(
            top, self.role.current.broker_id, list(self.epochs.entries), self.address(), tail_size, tail_crc
        )
        frame = codec.encode_hello(hello)
        if self.sign is not None:
            link.write(codec.encode_auth(sign_hello(self.sign, frame[codec.FRAME_HEADER_SIZE :])))
        link.write(frame)
        silent = self.config.ha_heartbeat_seconds * 3 + 5.0
        kind, body = await wait_within(link.next_frame(), silent)
        if kind != codec.JOIN:
            raise ProtocolError(f"master must answer HELLO with JOIN, got frame kind {kind}")
        join = codec.decode_join(body)
        file_size = store.commitlog_file_size
        if join.action == "refuse" or join.file_size != file_size:
            reason = (
                join.reason
                if join.action == "refuse"
                else (f"commitlog file size differs (master {join.file_size}, slave {file_size})")
            )
            if reason != self.refused:
                log.error("replication_refused", master=ha, offset=store.max_phy_offset, reason=reason)
            self.refused = reason
            return RETRY_SECONDS * 10
        self.refused = None
        if join.action == "truncate":
            dropped = store.truncate_to(join.offset)
            log.warning(
                "slave_truncated_to_master", master=ha, offset=join.offset, dropped_bytes=dropped, reason=join.reason
            )
        if store.max_phy_offset == 0 and join.offset:
            store.start_at(join.offset)
        self.epochs.replace(join.epochs)
        expected = store.max_phy_offset
        if expected != join.offset:
            raise ProtocolError(f"slave is at {expected} but the master streams from {join.offset}")
        self.connected = True
        self.last_frame_at = time.monotonic()
        log.info("replicating", master=ha, offset=expected, action=join.action, epoch=self.epochs.epoch)
        follower = _Follower(self, link, expected, file_size)
        link.follow(follower.take)  # the frames after JOIN, as they arrive
        # A master silent for ``silent`` seconds (no data, no heartbeat) is gone: checked every
        # REARM_SECONDS, so noticed between ``silent`` and ``silent + REARM_SECONDS`` after its last bytes.
        while not link.ended.done():
            await asyncio.wait((link.ended,), timeout=REARM_SECONDS)
            if not link.ended.done() and time.monotonic() - link.last_data_at > silent:
                raise TimeoutError(f"no frame from the master for {silent:.0f}s")
        raise link.ended.result()


class _Follower:
    """The stream after JOIN: appends the whole records DATA frames bring and ACKs, from the
    link's ``data_received`` (no task to wake per frame).

    ACKs at once when asked (a heartbeat, or a frame a SYNC_MASTER send waits on), else at
    most every LAZY_ACK_SECONDS. Data is ACKed as soon as the commitlog holds it, before the
    consume queues and the index are built (append_raw's ``written``), so the master's waiters
    do not wait for them. A record cut by a frame waits in ``pending`` for its rest.
    """

    def __init__(self, slave: HASlave, link: _SlaveLink, expected: int, file_size: int) -> None:
        self.slave = slave
        self.store = slave.store
        self.link = link
        self.expected = expected
        self.file_size = file_size
        self.pending = bytearray()
        self.acked = 0
        self.acked_at = 0.0
        self.acks = 0
        self.ack(expected)

    def ack(self, end: int) -> None:
        self.link.write(codec.encode_ack(end))
        self.acked, self.acked_at, self.acks = end, time.monotonic(), self.acks + 1

    def take(self, frames: list[tuple[int, memoryview]]) -> None:
        slave = self.slave
        slave.last_frame_at = self.link.last_data_at
        pending = self.pending
        ack_now = False
        for kind, body in frames:
            if kind != codec.DATA:
                raise ProtocolError(f"master sends only DATA after JOIN, got frame kind {kind}")
            offset, master_max, flags, data = codec.decode_data(body)
            at = self.expected + len(pending)
            if offset != at:
                raise ProtocolError(f"master sent data at {offset}, the slave expects {at}")
            slave.master_max = master_max
            if data:
                pending += data
                ack_now = ack_now or bool(flags & codec.ACK_NOW)
            else:
                ack_now = True  # a heartbeat: report where this slave is
        acks_before = self.acks
        due = ack_now or time.monotonic() - self.acked_at >= codec.LAZY_ACK_SECONDS
        if pending:
            n = whole_records_prefix(pending, self.expected, self.file_size)
            if n:
                with memoryview(pending) as view, view[:n] as piece:
                    self.expected = self.store.append_raw(self.expected, piece, self.ack if due else None)
                del pending[:n]
        if self.acks == acks_before and (ack_now or (due and self.expected != self.acked)):
            self.ack(self.expected)


class _SlaveLink(asyncio.Protocol):
    """The slave's end of the HA link: frames are decoded as bytes arrive. Until :meth:`follow`
    they wait for :meth:`next_frame` (the JOIN); after, each read's frames go to the follower
    at once. ``ended`` resolves with what ended the link (a ConnectionError when the master
    closed it; a follower's failure closes it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.decoder = codec.FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.ended: asyncio.Future[Exception] = loop.create_future()
        self.last_data_at = time.monotonic()
        self._frames: list[tuple[int, memoryview]] = []
        self._waiter: asyncio.Future[None] | None = None
        self._follower: Callable[[list[tuple[int, memoryview]]], None] | None = None
        self._loop = loop

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.last_data_at = time.monotonic()
        try:
            frames = self.decoder.feed(data)
            if self._follower is not None:
                self._follower(frames)
            elif frames:
                self._frames += frames
                self._wake()
        except Exception as exc:  # (a protocol callback must not raise: the link ends with it)
            self._end(exc)
            if self.transport is not None:
                self.transport.close()

    def eof_received(self) -> bool:
        self._end(ConnectionError("master closed the HA link"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc if exc is not None else ConnectionError("master closed the HA link"))

    async def next_frame(self) -> tuple[int, memoryview]:
        """The next frame not handed to a follower (raises what ended the link, if it ended first)."""
        while not self._frames:
            if self.ended.done():
                raise self.ended.result()
            self._waiter = self._loop.create_future()
            await self._waiter
        return self._frames.pop(0)

    def follow(self, take: Callable[[list[tuple[int, memoryview]]], None]) -> None:
        """From now on ``take`` gets each read's frames (first those already here)."""
        frames, self._frames = self._frames, []
        if frames:
            take(frames)
        self._follower = take

    def _end(self, failure: Exception) -> None:
        self._follower = None
        if not self.ended.done():
            self.ended.set_result(failure)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
