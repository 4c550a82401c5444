"""pymq.testing.LinkProxy, the partition tests' proxy: forwards both ways, a black hole stops bytes
in both directions but keeps the connections open, healing delivers what was held, in order.
An echo-like server on 127.0.0.1; no daemons."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pymq.tasks import wait_within
from pymq.testing import LinkProxy

QUIET = 0.3  # long enough for bytes to cross loopback many times over


class Upstream:
    """Records what each connection sent; ``push`` writes to the newest connection."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.writers: list[asyncio.StreamWriter] = []
        self.got = asyncio.Event()
        self.connections = 0
        self.eof = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        while data := await reader.read(65536):
            self.received += data
            self.got.set()
        self.eof.set()

    def push(self, data: bytes) -> None:
        self.writers[-1].write(data)


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    server = await asyncio.start_server(up.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield up, f"127.0.0.1:{port}"
    for w in up.writers:
        w.close()
    server.close()


async def connect(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = address.rpartition(":")
    return await asyncio.open_connection(host, int(port))


async def wait_for_bytes(up: Upstream, n: int) -> None:
    async def enough() -> None:
        while len(up.received) < n:
            up.got.clear()
            await up.got.wait()

    await wait_within(enough(), 5)


async def test_forwards_both_ways(upstream: tuple[Upstream, str]) -> None:
    up, target = upstream
    async with LinkProxy(target) as proxy:
        assert proxy.address.startswith("127.0.0.1:") and proxy.address != target
        reader, writer = await connect(proxy.address)
        writer.write(b"ping")
        await wait_for_bytes(up, 4)
        assert bytes(up.received) == b"ping" and proxy.accepted == 1
        up.push(b"pong")
        assert await wait_within(reader.readexactly(4), 5) == b"pong"
        writer.close()


async def test_a_black_hole_stops_bytes_both_ways_keeps_the_connection_and_heal_delivers_them(
    upstream: tuple[Upstream, str],
) -> None:
    up, target = upstream
    async with LinkProxy(target) as proxy:
        reader, writer = await connect(proxy.address)
        writer.write(b"a")
        await wait_for_bytes(up, 1)
        proxy.black_hole()
        assert proxy.blocked
        writer.write(b"bcd")
        await writer.drain()
        up.push(b"xyz")
        await asyncio.sleep(QUIET)
        assert bytes(up.received) == b"a"  # nothing reached the target
        with pytest.raises(TimeoutError):
            await wait_within(reader.read(1), QUIET)  # nothing came back, and no EOF: still open
        assert not reader.at_eof() and not writer.is_closing()
        proxy.heal()
        assert not proxy.blocked
        await wait_for_bytes(up, 4)
        assert bytes(up.received) == b"abcd"  # held, then delivered in order
        assert await wait_within(reader.readexactly(3), 5) == b"xyz"
        writer.close()


async def test_a_connection_made_during_a_black_hole_reaches_nothing_until_healed(
    upstream: tuple[Upstream, str],
) -> None:
    up, target = upstream
    async with LinkProxy(target) as proxy:
        proxy.black_hole()
        _, writer = await connect(proxy.address)  # accepted, as a kernel would
        writer.write(b"hello")
        await asyncio.sleep(QUIET)
        assert up.connections == 0 and not up.received and proxy.accepted == 1
        proxy.heal()
        await wait_for_bytes(up, 5)
        assert up.connections == 1 and bytes(up.received) == b"hello"
        writer.close()


async def test_a_side_closing_during_a_black_hole_is_not_seen_across_it_until_healed(
    upstream: tuple[Upstream, str],
) -> None:
    up, target = upstream
    async with LinkProxy(target) as proxy:
        _, writer = await connect(proxy.address)
        writer.write(b"x")
        await wait_for_bytes(up, 1)
        proxy.black_hole()  # the proxy is waiting for the client's next bytes
        writer.close()  # the client goes away while the link is cut
        await asyncio.sleep(QUIET)
        assert not up.eof.is_set()
        proxy.heal()
        await wait_within(up.eof.wait(), 5)  # the end of the stream, once healed
        assert bytes(up.received) == b"x"


async def test_close_ends_every_connection(upstream: tuple[Upstream, str]) -> None:
    _, target = upstream
    proxy = await LinkProxy(target).start()
    reader, writer = await connect(proxy.address)
    proxy.black_hole()
    await proxy.close()
    assert await wait_within(reader.read(1), 5) == b""  # closed by the proxy: EOF
    writer.close()
    with pytest.raises(OSError):
        await connect(proxy.address)
