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
the master asks, else lazily), before the consume queues are built.

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
READ_SIZE = 1024 * 1024
#: the steady stream's silence timeout is pushed back at most this often
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
        reader, writer = await wait_within(
            asyncio.open_connection(host, int(port), ssl=self.ssl, limit=codec.MAX_FRAME), 5.0
        )
        try:
            return await self._follow(reader, writer, ha)
        finally:
            writer.close()

    async def _follow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ha: str) -> float:
        store = self.store
        top = store.max_phy_offset
        tail_start, tail_size = tail_range(top, store.min_phy_offset)
        tail_crc = crc_of(store.read_commitlog(tail_start, tail_size))
        hello = codec.Hello(
            top, self.role.current.broker_id, list(self.epochs.entries), self.address(), tail_size, tail_crc
        )
        frame = codec.encode_hello(hello)
        if self.sign is not None:
            writer.write(codec.encode_auth(sign_hello(self.sign, frame[codec.FRAME_HEADER_SIZE :])))
        writer.write(frame)
        silent = self.config.ha_heartbeat_seconds * 3 + 5.0
        decoder = codec.FrameDecoder()
        join = None
        frames: list[tuple[int, memoryview]] = []
        while join is None:
            chunk = await wait_within(reader.read(READ_SIZE), silent)
            if not chunk:
                raise ConnectionError("master closed the HA link before answering")
            frames = decoder.feed(chunk)
            if frames:
                kind, body = frames.pop(0)
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
        pending = bytearray()
        acked = acks = 0
        acked_at = 0.0

        def ack(end: int) -> None:
            nonlocal acked, acked_at, acks
            writer.write(codec.encode_ack(end))
            acked, acked_at, acks = end, time.monotonic(), acks + 1

        ack(expected)
        # A master silent for ``silent`` seconds (no data, no heartbeat) is gone: one timeout,
        # pushed back at most every REARM_SECONDS, so it fires between silent - REARM_SECONDS
        # and silent seconds after the last read.
        loop = asyncio.get_running_loop()
        armed = -REARM_SECONDS
        async with asyncio.timeout(None) as silence:
            while True:
                ack_now = False
                for kind, body in frames:
                    if kind != codec.DATA:
                        raise ProtocolError(f"master sends only DATA after JOIN, got frame kind {kind}")
                    offset, master_max, flags, data = codec.decode_data(body)
                    if offset != expected + len(pending):
                        at = expected + len(pending)
                        raise ProtocolError(f"master sent data at {offset}, the slave expects {at}")
                    self.master_max = master_max
                    if data:
                        pending += data
                        ack_now = ack_now or bool(flags & codec.ACK_NOW)
                    else:
                        ack_now = True  # a heartbeat: report where this slave is
                # ACK at once when asked (a heartbeat, or a frame a SYNC_MASTER send waits on),
                # else at most every LAZY_ACK_SECONDS. Data is ACKed as soon as the commitlog
                # holds it, before the consume queues and the index are built (append_raw's
                # ``written``), so the master's waiters do not wait for them.
                acks_before = acks
                due = ack_now or time.monotonic() - acked_at >= codec.LAZY_ACK_SECONDS
                if pending:
                    n = whole_records_prefix(pending, expected, file_size)
                    if n:
                        with memoryview(pending) as view, view[:n] as piece:
                            expected = store.append_raw(expected, piece, ack if due else None)
                        del pending[:n]
                if acks == acks_before and (ack_now or (due and expected != acked)):
                    ack(expected)
                now = loop.time()
                if now - armed >= REARM_SECONDS:  # (not per read: a busy link reads thousands of times a second)
                    silence.reschedule(now + silent)
                    armed = now
                chunk = await reader.read(READ_SIZE)
                if not chunk:
                    raise ConnectionError("master closed the HA link")
                self.last_frame_at = time.monotonic()
                frames = decoder.feed(chunk)
