"""In-process asyncio tests of RpcServer, RpcClient, Connection and Dispatcher on loopback."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from pymq import errors
from pymq.protocol.codes import ResponseCode
from pymq.protocol.frame import Command, FrameDecoder, encode_bytes
from pymq.transport import Backoff, Connection, Dispatcher, RpcClient, RpcServer

ECHO, SLOW, BIG, PUSH = 1, 2, 3, 4
MiB = 1 << 20
BIG_BODY = b"x" * MiB


def echo(cmd: Command, conn: Connection) -> Command:
    return cmd.response(0, "ok", {"echo": cmd.ext.get("v")}, cmd.body_bytes())


def boom(cmd: Command, conn: Connection) -> Command:
    raise RuntimeError("boom")


async def aboom(cmd: Command, conn: Connection) -> Command:
    raise KeyError("kaboom")


async def invalid(cmd: Command, conn: Connection) -> Command:
    raise errors.InvalidRequestError("bad queueId")


def unencodable(cmd: Command, conn: Connection) -> Command:
    return cmd.response(ext={"bad": object()})


async def aunencodable(cmd: Command, conn: Connection) -> Command:
    return unencodable(cmd, conn)


class Net:
    """Everything a test opens (servers, clients, raw sockets, sink servers); the fixture closes it all."""

    def __init__(self) -> None:
        self.servers, self.clients, self.writers, self.sinks = [], [], [], []  # type: ignore[var-annotated]

    async def server(self, handlers=None, port: int = 0) -> RpcServer:
        self.servers.append(RpcServer(Dispatcher({ECHO: echo, **(handlers or {})}), "127.0.0.1", port))
        await self.servers[-1].start()
        return self.servers[-1]

    def client(self, dispatcher: Dispatcher | None = None) -> RpcClient:
        self.clients.append(RpcClient(dispatcher))
        return self.clients[-1]

    async def raw(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        self.writers.append(writer)
        return reader, writer

    async def sink(self) -> str:  # a TCP server that accepts connections and never reads
        self.sinks.append(await asyncio.start_server(lambda r, w: self.writers.append(w), "127.0.0.1", 0))
        return f"127.0.0.1:{self.sinks[-1].sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        for client in self.clients:
            await client.close()
        for srv in self.servers:
            await srv.close(grace=0.5)
            for conn in list(srv.connections):
                conn.abort()
        for sink in self.sinks:
            sink.close()
            await sink.wait_closed()
        await asyncio.sleep(0.01)


@pytest.fixture
async def net():
    n = Net()
    try:
        yield n
    finally:
        await n.close()


async def echoed(client: RpcClient, addr: str, body: bytes) -> bytes:
    return (await client.invoke(addr, Command.request(ECHO, body=body))).body_bytes()


async def read_frame(reader: asyncio.StreamReader) -> Command:
    prefix = await reader.readexactly(8)
    (cmd,) = FrameDecoder().feed(prefix + await reader.readexactly(struct.unpack(">I", prefix[:4])[0] - 4))
    return cmd


async def eventually(cond, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_request_response(net) -> None:
    """A request gets the handler's response with ext, remark and body intact."""
    srv, client = await net.server(), net.client()
    resp = await client.invoke(srv.address, Command.request(ECHO, {"v": 7}, [b"ab", b"cd"]))
    assert (resp.code, resp.remark, resp.ext, resp.body_bytes()) == (0, "ok", {"echo": 7}, b"abcd")
    assert resp.is_response and client.is_connected(srv.address) and len(srv.connections) == 1
    assert (await client.invoke_ok(srv.address, Command.request(ECHO))).code == 0


async def test_unknown_code_and_error_mapping(net) -> None:
    """An unhandled code answers REQUEST_CODE_NOT_SUPPORTED; invoke_ok maps error codes to exceptions."""
    no_topic = lambda c, conn: c.response(ResponseCode.TOPIC_NOT_EXIST, "no T")  # noqa: E731
    srv, client = await net.server({5: no_topic}), net.client()
    resp = await client.invoke(srv.address, Command.request(4242))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in resp.remark
    with pytest.raises(errors.RequestCodeNotSupportedError):
        await client.invoke_ok(srv.address, Command.request(4242))
    with pytest.raises(errors.TopicNotExistError) as info:
        await client.invoke_ok(srv.address, Command.request(5))
    assert info.value.remark == "no T" and info.value.addr == srv.address
    assert (await client.invoke_ok(srv.address, Command.request(5), ok=(17,))).code == 17


async def test_concurrent_requests_matched_by_opaque(net) -> None:
    """Concurrent requests answered in reverse order each get their own response."""
    n, arrived = 8, []
    gates = [asyncio.Event() for _ in range(n)]

    async def gated(cmd: Command, conn: Connection) -> Command:
        arrived.append(cmd.ext["i"])
        await gates[cmd.ext["i"]].wait()
        return cmd.response(body=b"r%d" % cmd.ext["i"])

    srv, client = await net.server({SLOW: gated}), net.client()
    call = lambda i: client.invoke(srv.address, Command.request(SLOW, {"i": i}))  # noqa: E731
    tasks = [asyncio.create_task(call(i)) for i in range(n)]
    try:
        await eventually(lambda: len(arrived) == n)
        for i in reversed(range(n)):
            gates[i].set()
            assert (await asyncio.wait_for(tasks[i], 2)).body_bytes() == b"r%d" % i
            assert all(not t.done() for t in tasks[:i])
    finally:
        for g in gates:
            g.set()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_backoff_schedule() -> None:
    """Backoff doubles from initial up to maximum with jitter in [0.5, 1] x delay, and resets on success."""
    b, delays = Backoff(initial=0.1, maximum=0.5), []
    for _ in range(5):
        b.failed(100.0)
        delays.append(b.delay)
        assert 100.0 + b.delay * 0.5 <= b.next_attempt <= 100.0 + b.delay
    assert delays == [0.1, 0.2, 0.4, 0.5, 0.5] and b.remaining(100.0) > 0 and b.remaining(101.0) == 0
    b.succeeded()
    assert b.delay == 0 and b.remaining(100.0) == 0


@pytest.mark.parametrize("burst", [False, True], ids=["trickle", "burst"])
async def test_flow_control_pauses_reading(net, burst: bool) -> None:
    """A peer that never reads large responses makes the server pause reading it, with bounded buffering."""
    srv = await net.server({BIG: lambda c, conn: c.response(body=BIG_BODY)})
    reader, writer = await net.raw(srv.port)
    await eventually(lambda: len(srv.connections) == 1)
    (sconn,) = srv.connections
    n, request, peak = 64, encode_bytes(Command(BIG, 1)), 0
    if burst:
        writer.write(request * n)
    else:
        for _ in range(n):
            writer.write(request)
            await asyncio.sleep(0.002)
            peak = max(peak, sconn.transport.get_write_buffer_size())
    await eventually(lambda: sconn.flow.read_paused)
    await asyncio.sleep(0.05)
    peak = max(peak, sconn.transport.get_write_buffer_size())
    assert sconn.flow.read_paused
    client = net.client()  # another client is served normally meanwhile
    assert len((await client.invoke(srv.address, Command.request(BIG), timeout=5)).body) == MiB
    assert await echoed(client, srv.address, b"hi") == b"hi"
    assert peak < 24 * MiB, f"server buffered {peak / MiB:.1f} MiB for one non-reading peer"
    for _ in range(n):  # once the peer reads again, reading resumes and every response arrives
        assert len((await asyncio.wait_for(read_frame(reader), 5)).body) == MiB
    await eventually(lambda: not sconn.flow.read_paused)


@pytest.mark.parametrize("kind", ["oneway", "request"])
async def test_sender_waits_for_drain_and_is_released_on_close(net, kind: str) -> None:
    """A sender to a non-reading peer waits in drain; on close a waiting request fails as closed."""
    client, addr = net.client(), await net.sink()
    conn = await client.connection(addr)
    while conn.flow.writable:
        await client.invoke_oneway(addr, Command.request(ECHO, body=BIG_BODY))
    assert conn.transport.get_write_buffer_size() < 8 * MiB
    if kind == "oneway":
        task = asyncio.create_task(client.invoke_oneway(addr, Command.request(ECHO, body=BIG_BODY)))
    else:
        task = asyncio.create_task(conn.request(Command.request(ECHO), timeout=3))
    await asyncio.sleep(0.05)
    assert not task.done()
    conn.abort()
    (result,) = await asyncio.gather(asyncio.wait_for(task, 1), return_exceptions=True)
    if kind == "oneway":  # a oneway may be dropped silently, but must not hang
        assert result is None or isinstance(result, errors.ConnectionClosedError)
    else:
        assert isinstance(result, errors.ConnectionClosedError), result


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        (boom, "RuntimeError: boom"),
        (aboom, "KeyError: 'kaboom'"),
        (unencodable, "cannot encode"),
        (aunencodable, "cannot encode"),
    ],
    ids=["sync", "async", "unencodable", "async-unencodable"],
)
async def test_handler_failure_is_system_error(net, handler, reason: str) -> None:
    """A failing handler answers SYSTEM_ERROR with the reason, and the server keeps serving."""
    srv = await net.server({SLOW: handler})
    client = net.client()
    resp = await client.invoke(srv.address, Command.request(SLOW))
    assert resp.code == ResponseCode.SYSTEM_ERROR and reason in resp.remark
    assert await echoed(client, srv.address, b"still here") == b"still here"


async def test_remote_error_keeps_its_code(net) -> None:
    """A handler raising InvalidRequestError answers INVALID_PARAMETER (213) with its message."""
    srv = await net.server({SLOW: invalid})
    resp = await net.client().invoke(srv.address, Command.request(SLOW))
    assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark == "bad queueId"


async def test_timeout_then_late_response_ignored(net) -> None:
    """A request past its timeout raises RequestTimeoutError; its late answer is dropped quietly."""
    gate = asyncio.Event()

    async def slow(cmd: Command, conn: Connection) -> Command:
        await gate.wait()
        return cmd.response()

    srv = await net.server({SLOW: slow})
    client = net.client()
    with pytest.raises(errors.RequestTimeoutError):
        await client.invoke(srv.address, Command.request(SLOW), timeout=0.05)
    gate.set()
    assert await echoed(client, srv.address, b"next") == b"next"


async def test_oneway_reaches_handler_without_answer(net) -> None:
    """A oneway request is handled and never answered."""
    got: list[bytes] = []

    def record(cmd: Command, conn: Connection) -> Command:
        got.append(cmd.body_bytes())
        return cmd.response()

    srv = await net.server({SLOW: record})
    client = net.client()
    await client.invoke_oneway(srv.address, Command.request(SLOW, body=b"fire"))
    await eventually(lambda: got == [b"fire"])
    conn = await client.connection(srv.address)
    await asyncio.sleep(0.05)
    assert conn.in_flight == 0


async def test_server_pushes_request_to_client(net) -> None:
    """A server handler can send a request back over the same connection; the client's dispatcher answers."""
    answers: list[Command] = []

    async def push(cmd: Command, conn: Connection) -> Command:
        answers.append(await conn.request(Command.request(PUSH, {"q": 1}), timeout=2))
        return cmd.response()

    srv = await net.server({SLOW: push})
    client = net.client(Dispatcher({PUSH: lambda cmd, conn: cmd.response(ext={"a": cmd.ext["q"] + 1})}))
    assert (await client.invoke(srv.address, Command.request(SLOW))).code == 0
    assert answers[0].ext == {"a": 2}


@pytest.mark.parametrize("garbage", [b"\xff" * 12, struct.pack(">II", 1 << 30, 4) + b"xxxx"], ids=["junk", "oversized"])
async def test_malformed_frame_closes_only_that_connection(net, garbage: bytes) -> None:
    """Garbage or an oversized length closes that connection; other clients are unaffected."""
    srv = await net.server()
    client = net.client()
    assert await echoed(client, srv.address, b"a") == b"a"
    reader, writer = await net.raw(srv.port)
    writer.write(garbage)
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 3) == b""
    assert await echoed(client, srv.address, b"b") == b"b"


async def test_connection_loss_fails_pending_requests(net) -> None:
    """Pending requests fail with ConnectionClosedError when the connection drops."""
    gate = asyncio.Event()

    async def never(cmd: Command, conn: Connection) -> Command:
        conn.abort()
        await gate.wait()
        return cmd.response()

    srv = await net.server({SLOW: never})
    with pytest.raises(errors.ConnectionClosedError):
        await net.client().invoke(srv.address, Command.request(SLOW), timeout=5)
    gate.set()


async def test_reconnects_after_server_restart_and_backs_off(net) -> None:
    """After a failed connect the next attempt fails fast (backoff); once the server is back, calls succeed."""
    srv = await net.server()
    port = srv.port
    client = net.client()
    assert await echoed(client, srv.address, b"1") == b"1"
    await srv.close(grace=0.1)
    net.servers.remove(srv)
    await asyncio.sleep(0.05)
    with pytest.raises(errors.TransportError):
        await client.invoke(f"127.0.0.1:{port}", Command.request(ECHO), timeout=1)
    with pytest.raises(errors.ConnectError, match=r"Connect call failed.*backing off"):  # the cause, not only the wait
        await client.invoke(f"127.0.0.1:{port}", Command.request(ECHO), timeout=1)
    again = await net.server(port=port)
    await asyncio.sleep(0.2)  # longer than the first backoff step
    assert await echoed(client, again.address, b"2") == b"2"


async def test_pipelined_requests_behind_busy_handlers_pause_reading(net) -> None:
    """Requests piling up behind busy async handlers stop the server reading that peer; all are answered later."""
    from pymq.transport.connection import MAX_BACKLOG, MAX_INFLIGHT_HANDLERS

    gate = asyncio.Event()

    async def held(cmd: Command, conn: Connection) -> Command:
        await gate.wait()
        return cmd.response(body=cmd.body_bytes())

    srv = await net.server({SLOW: held})
    reader, writer = await net.raw(srv.port)
    await eventually(lambda: len(srv.connections) == 1)
    (sconn,) = srv.connections
    n = 3 * (MAX_INFLIGHT_HANDLERS + MAX_BACKLOG)
    writer.write(b"".join(encode_bytes(Command(SLOW, i + 1, body=b"p" * 200)) for i in range(n)))
    await eventually(lambda: not sconn.flow.reading)
    await asyncio.sleep(0.05)
    assert sconn.inflight == MAX_INFLIGHT_HANDLERS
    # bounded by the threshold plus what one read may carry (256 KiB of 220-byte frames)
    assert len(sconn._backlog) < MAX_BACKLOG + 1300, len(sconn._backlog)
    client = net.client()  # another client is served normally meanwhile
    assert await echoed(client, srv.address, b"hi") == b"hi"
    gate.set()
    decoder, opaques = FrameDecoder(), set()
    while len(opaques) < n:
        chunk = await asyncio.wait_for(reader.read(1 << 16), 5)
        assert chunk, "server closed the connection"
        opaques.update(c.opaque for c in decoder.feed(chunk))
    assert opaques == set(range(1, n + 1))
    await eventually(lambda: sconn.flow.reading)


async def test_handler_returning_a_future_is_answered_when_it_resolves(net) -> None:
    """A handler may return a plain future (SYNC_FLUSH group commit): answered from its callback, errors mapped."""
    pending: list[tuple[Command, asyncio.Future]] = []

    def deferred(cmd: Command, conn: Connection) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        pending.append((cmd, fut))
        return fut

    srv = await net.server({SLOW: deferred})
    client = net.client()
    calls = [asyncio.create_task(client.invoke(srv.address, Command.request(SLOW, {"i": i}))) for i in range(3)]
    await eventually(lambda: len(pending) == 3)
    assert srv.dispatcher.in_flight == 3 and not any(c.done() for c in calls)
    by_i = {cmd.ext["i"]: (cmd, fut) for cmd, fut in pending}
    by_i[2][1].set_result(by_i[2][0].response(body=b"two"))
    by_i[0][1].set_exception(RuntimeError("late boom"))
    by_i[1][1].set_result(by_i[1][0].response(body=b"one"))
    r0, r1, r2 = await asyncio.wait_for(asyncio.gather(*calls), 5)
    assert r0.code == ResponseCode.SYSTEM_ERROR and "late boom" in r0.remark
    assert (r1.body_bytes(), r2.body_bytes()) == (b"one", b"two")
    assert srv.dispatcher.in_flight == 0
