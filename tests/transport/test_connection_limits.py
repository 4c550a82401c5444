"""Server connection limits: idle timeout, frame read timeout, and the partial-frame budget."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pymq.broker.app import BrokerApp
from pymq.config import BrokerConfig, NamesrvConfig, StoreConfig
from pymq.nameserver.app import NamesrvApp
from pymq.protocol.frame import Command, encode_bytes
from pymq.testing import capture_logs
from pymq.transport import Connection, Dispatcher, RpcClient, RpcServer
from pymq.transport.limits import ConnectionLimits, limits_from_settings
from tests.helpers import wait_until

pytestmark = pytest.mark.integration

ECHO, SLOW = 1, 2
KiB = 1024


def echo(cmd: Command, conn: Connection) -> Command:
    return cmd.response(0, "ok", body=cmd.body_bytes())


async def slow(cmd: Command, conn: Connection) -> Command:
    await asyncio.sleep(0.8)
    return cmd.response(0, "slow")


class Servers:
    def __init__(self) -> None:
        self.servers: list[RpcServer] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self, limits: ConnectionLimits) -> RpcServer:
        server = RpcServer(Dispatcher({ECHO: echo, SLOW: slow}), "127.0.0.1", 0, limits=limits)
        await server.start()
        self.servers.append(server)
        return server

    async def raw(self, server: RpcServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        self.writers.append(writer)
        return reader, writer


@pytest.fixture
async def net() -> AsyncIterator[Servers]:
    s = Servers()
    yield s
    for w in s.writers:
        w.close()
    for server in s.servers:
        await server.close(grace=0.1)


def frame(size: int, code: int = ECHO) -> bytes:
    """A whole request frame whose body makes it about ``size`` bytes."""
    return encode_bytes(Command.request(code, {}, b"x" * size))


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """True if the server closed the connection within ``seconds`` (EOF or reset)."""
    try:
        while await asyncio.wait_for(reader.read(65536), seconds):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def test_idle_connection_is_closed_and_a_busy_one_is_not(net: Servers) -> None:
    """RocketMQ closes channels idle for 120 s; here 0.3 s. A connection that keeps sending stays."""
    server = await net.start(ConnectionLimits(idle_timeout=0.3, frame_read_timeout=None, max_partial_frame_bytes=None))
    idle_reader, _ = await net.raw(server)
    async with RpcClient() as rpc:
        with capture_logs() as logs:
            for _ in range(8):  # 0.8 s of traffic, more than twice the idle timeout
                assert (await rpc.invoke(server.address, Command.request(ECHO, {}, b"hi"))).code == 0
                await asyncio.sleep(0.1)
            assert await closed_within(idle_reader, 2.0)
        closes = [e for e in logs if e["event"] == "closing_connection"]
        assert len(closes) == 1 and "idle" in closes[0]["reason"]
        assert len(server.connections) == 1  # the busy one


async def test_a_request_in_flight_is_not_idle(net: Servers) -> None:
    server = await net.start(ConnectionLimits(idle_timeout=0.3, frame_read_timeout=None))
    async with RpcClient() as rpc:
        resp = await rpc.invoke(server.address, Command.request(SLOW, {}, b""), timeout=3)
    assert resp.remark == "slow"


@pytest.mark.parametrize("dribble", [False, True])
async def test_half_sent_frame_times_out(net: Servers, dribble: bool) -> None:
    """A frame begun must be complete within frame_read_timeout, even if its bytes trickle in."""
    server = await net.start(ConnectionLimits(idle_timeout=None, frame_read_timeout=0.3))
    reader, writer = await net.raw(server)
    data = frame(10 * KiB)
    writer.write(data[:100])
    with capture_logs() as logs:
        if dribble:
            for i in range(100, 110):
                writer.write(data[i : i + 1])
                await asyncio.sleep(0.05)
        assert await closed_within(reader, 2.0)
    reasons = [e["reason"] for e in logs if e["event"] == "closing_connection"]
    assert len(reasons) == 1 and reasons[0].startswith("frame incomplete after 0.3s"), reasons
    await asyncio.sleep(0)
    assert server.limits is not None and server.limits.partial_bytes == 0


async def test_whole_frames_never_time_out(net: Servers) -> None:
    """Frames completed one after another (pipelined, split across reads) are not one slow frame."""
    server = await net.start(ConnectionLimits(idle_timeout=None, frame_read_timeout=0.3))
    reader, writer = await net.raw(server)
    data = frame(1000) * 12
    for i in range(0, len(data), 1000):  # every write ends mid-frame
        writer.write(data[i : i + 1000])
        await asyncio.sleep(0.05)
    assert not await closed_within(reader, 0.5)


async def test_partial_frames_past_the_budget_are_refused(net: Servers) -> None:
    """Many half-sent large frames cannot pin more than the cap: past it, a connection whose large frame
    keeps growing is closed (logged); small requests still work, and a finished frame frees its bytes."""
    cap = 256 * KiB
    server = await net.start(ConnectionLimits(idle_timeout=None, frame_read_timeout=None, max_partial_frame_bytes=cap))
    limits = server.limits
    assert limits is not None
    # Under the cap on its own: however its second half arrives (one read or many, on a loaded
    # machine), this frame alone never goes over it.
    first = frame(240 * KiB)
    r1, w1 = await net.raw(server)
    w1.write(first[: 120 * KiB])
    await w1.drain()
    await wait_until(lambda: limits.partial_bytes == 120 * KiB, what="the first half frame counted")
    with capture_logs() as logs:
        attackers = []
        for _ in range(3):
            reader, writer = await net.raw(server)
            writer.write(frame(400 * KiB)[: 200 * KiB])
            attackers.append(reader)
        for reader in attackers:
            assert await closed_within(reader, 2.0)
    refused = [e for e in logs if e["event"] == "partial_frame_refused_closing_connection"]
    assert len(refused) == 3 and refused[0]["limit"] == cap
    assert limits.partial_bytes == 120 * KiB  # only the first connection's half frame
    async with RpcClient() as rpc:  # small frames are never refused
        assert (await rpc.invoke(server.address, Command.request(ECHO, {}, b"small"))).code == 0
    w1.write(first[120 * KiB :])  # the first frame completes: answered, and its bytes are released
    head = await asyncio.wait_for(r1.readexactly(8), 2)
    frame_len, _ = struct.unpack(">II", head)
    await asyncio.wait_for(r1.readexactly(frame_len - 4), 2)
    assert limits.partial_bytes == 0


async def test_daemons_take_their_limits_from_config(tmp_path: Path) -> None:
    """idle_timeout_seconds (RocketMQ: 120), frame_read_timeout_seconds, max_partial_frame_bytes; 0 = off."""
    ns = NamesrvApp(NamesrvConfig(idle_timeout_seconds=5, frame_read_timeout_seconds=0))
    assert ns.server.limits == limits_from_settings(5, 0, 128 * 1024 * 1024)
    assert ns.server.limits.frame_read_timeout is None and ns.server.limits.idle_timeout == 5
    cfg = BrokerConfig(store=StoreConfig(store_dir=tmp_path), max_partial_frame_bytes=0)
    broker = BrokerApp(cfg)
    limits = broker.server.limits
    assert limits is not None and limits.idle_timeout == 120 and limits.max_partial_frame_bytes is None
