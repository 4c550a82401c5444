"""Connection's write coalescing and its one request-timeout timer, on a recording fake transport."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pymq import errors
from pymq.protocol.command import Command
from pymq.protocol.frame import FrameDecoder, encode_bytes
from pymq.transport import Dispatcher
from pymq.transport.codec import default_codec
from pymq.transport.connection import COALESCE_MAX_BYTES, Connection
from tests.helpers import RecordingTransport

ECHO, BIG = 1, 2


def _connection(
    handlers: dict[int, Any] | None = None, *, server_side: bool = True
) -> tuple[Connection, RecordingTransport]:
    dispatcher = Dispatcher({ECHO: lambda c, ch: c.response(body=c.body_bytes()), **(handlers or {})})
    conn = Connection(dispatcher, default_codec(64 << 20), server_side=server_side)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def _requests(code: int, n: int, body: bytes = b"") -> bytes:
    return b"".join(encode_bytes(Command(code, i + 1, 0, None, {}, body or b"%d" % i)) for i in range(n))


def _decoded(chunks: list[bytes]) -> list[Command]:
    decoder = FrameDecoder(64 << 20)
    return [cmd for chunk in chunks for cmd in decoder.feed(chunk)]


async def test_answers_to_one_read_go_out_in_one_write_in_order() -> None:
    conn, transport = _connection()
    conn.data_received(_requests(ECHO, 16))
    assert len(transport.calls) == 1
    answers = _decoded(transport.calls)
    assert [a.opaque for a in answers] == list(range(1, 17))
    assert [a.body_bytes() for a in answers] == [b"%d" % i for i in range(16)]


async def test_large_answers_are_not_held_until_the_end_of_the_read() -> None:
    """Flow control must see big answers as they are made, not 64 of them at once."""
    body = b"x" * (COALESCE_MAX_BYTES + 1)
    conn, transport = _connection({BIG: lambda c, ch: c.response(body=body)})
    conn.data_received(_requests(BIG, 8))
    assert len(transport.calls) == 8
    assert max(len(c) for c in transport.calls) < 2 * len(body)
    assert [a.opaque for a in _decoded(transport.calls)] == list(range(1, 9))


async def test_writes_of_one_tick_outside_a_read_share_a_write() -> None:
    """A client's first write goes out at once; the rest of the tick's writes follow in one more call."""
    conn, transport = _connection(server_side=False)
    for i in range(5):
        conn.write_command(Command(ECHO, 100 + i, 1, None, {}, b"r"))
    assert len(transport.calls) == 1  # the first: no added latency
    await asyncio.sleep(0)
    assert len(transport.calls) == 2
    assert [a.opaque for a in _decoded(transport.calls)] == [100, 101, 102, 103, 104]
    conn.write_command(Command(ECHO, 200, 1, None, {}, b"r"))  # a new tick: straight out again
    assert len(transport.calls) == 3


async def test_a_shared_oneway_waits_for_the_next_request_of_its_tick() -> None:
    """``send_oneway_now(share=True)`` (a producer's END_TRANSACTION) is held even as the tick's first
    write: the request written after it in the same tick (the next half message) goes in the same call."""
    conn, transport = _connection(server_side=False)
    assert conn.send_oneway_now(Command(ECHO, 0, 0, None, {}, b"end"), share=True)
    assert transport.calls == []
    request = conn.send_request(Command(ECHO, 0, 0, None, {}, b"next"), 5)  # (as the producer's task goes on)
    assert request is not None and transport.calls == []
    await asyncio.sleep(0)  # the tick's flush
    assert len(transport.calls) == 1
    sent = _decoded(transport.calls)
    assert [c.body_bytes() for c in sent] == [b"end", b"next"] and sent[0].is_oneway
    conn.data_received(encode_bytes(sent[1].response(body=b"ok")))
    assert (await request).body_bytes() == b"ok"
    # Alone, a shared oneway still goes out with that flush.
    assert conn.send_oneway_now(Command(ECHO, 0, 0, None, {}, b"last"), share=True)
    await asyncio.sleep(0)
    assert [c.body_bytes() for c in _decoded(transport.calls[1:])] == [b"last"]
    # Without ``share`` it is the tick's first write: out at once.
    assert conn.send_oneway_now(Command(ECHO, 0, 0, None, {}, b"now"))
    assert [c.body_bytes() for c in _decoded(transport.calls[2:])] == [b"now"]


async def test_answers_finished_outside_a_read_go_out_together_on_the_next_tick() -> None:
    """A server holds answers finished by one event (an ACK releasing SYNC_MASTER sends, a group
    commit) for the tick's end: one write for all of them, in order, however many there are."""
    conn, transport = _connection()
    loop = asyncio.get_running_loop()
    released: list[asyncio.Future[None]] = [loop.create_future() for _ in range(5)]
    for i, fut in enumerate(released):
        fut.add_done_callback(lambda _f, i=i: conn.write_command(Command(ECHO, 100 + i, 1, None, {}, b"r")))
    for fut in released:  # one event releases them all
        fut.set_result(None)
    await asyncio.sleep(0)  # the done callbacks write
    await asyncio.sleep(0)  # the tick's flush
    assert len(transport.calls) == 1
    assert [a.opaque for a in _decoded(transport.calls)] == [100, 101, 102, 103, 104]
    conn.write_command(Command(ECHO, 200, 1, None, {}, b"r"))
    assert len(transport.calls) == 1  # held for the tick
    await asyncio.sleep(0)
    assert len(transport.calls) == 2


async def test_close_sends_what_is_queued_first() -> None:
    conn, transport = _connection()
    conn.write_command(Command(ECHO, 1, 1, None, {}, b"a"))
    conn.write_command(Command(ECHO, 2, 1, None, {}, b"b"))
    conn.close()
    assert [a.opaque for a in _decoded(transport.calls)] == [1, 2] and transport.closed


async def test_requests_time_out_from_one_timer_and_answered_ones_are_forgotten() -> None:
    conn, transport = _connection()
    loop = asyncio.get_running_loop()
    started = loop.time()
    short = [asyncio.ensure_future(conn.request(Command(ECHO, 0, 0, None, {}, b"s"), 0.05)) for _ in range(3)]
    long = asyncio.ensure_future(conn.request(Command(ECHO, 0, 0, None, {}, b"l"), 30))
    answered = asyncio.ensure_future(conn.request(Command(ECHO, 0, 0, None, {}, b"a"), 0.05))
    for _ in range(2):  # the tasks write, then the tick's flush
        await asyncio.sleep(0)
    sent = _decoded(transport.calls)
    assert len(sent) == 5
    conn.data_received(encode_bytes(sent[4].response(body=b"ok")))  # answer the last one
    assert (await answered).body_bytes() == b"ok"
    for fut in short:
        with pytest.raises(errors.RequestTimeoutError):
            await fut
    waited = loop.time() - started
    assert 0.04 <= waited < 1.0, f"a 50 ms timeout fired after {waited:.3f}s"
    assert not long.done()
    # Only the unanswered long request is still remembered.
    assert sum(len(d) for d in conn._deadlines.values()) == 1
    conn.connection_lost(None)
    with pytest.raises(errors.ConnectionClosedError):
        await long
    assert not conn._deadlines and conn._timeout_timer is None


async def test_a_shorter_timeout_after_a_longer_one_still_fires_on_time() -> None:
    conn, _transport = _connection()
    loop = asyncio.get_running_loop()
    long = asyncio.ensure_future(conn.request(Command(ECHO, 0, 0, None, {}, b"l"), 20))
    await asyncio.sleep(0)
    started = loop.time()
    with pytest.raises(errors.RequestTimeoutError):
        await conn.request(Command(ECHO, 0, 0, None, {}, b"s"), 0.05)
    assert loop.time() - started < 0.5
    long.cancel()
    conn.connection_lost(None)


async def test_timeouts_that_differ_by_microseconds_share_one_deadline_queue() -> None:
    """Callers pass what is left of a budget: a new float each time, but not a new queue each time."""
    conn, _transport = _connection()
    futs = [
        asyncio.ensure_future(conn.request(Command(ECHO, 0, 0, None, {}, b"x"), 3.0 - i * 1e-6)) for i in range(200)
    ]
    await asyncio.sleep(0)
    assert len(conn._deadlines) == 1 and sum(len(d) for d in conn._deadlines.values()) == 200
    for f in futs:
        f.cancel()
    await asyncio.gather(*futs, return_exceptions=True)
    conn.connection_lost(None)


class _TlsTransport(RecordingTransport):
    """A recording transport that says it is TLS and records each ``write`` (a TLS record's worth)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return object() if name == "ssl_object" else default

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, bufs: list[Any]) -> None:  # a TLS transport: one record per buffer
        raise AssertionError("a TLS connection's writes must be joined")


async def test_a_tls_connection_writes_each_tick_as_one_buffer() -> None:
    """TLS makes a record of every buffer it is handed: a frame's header and body go as one."""
    dispatcher = Dispatcher({ECHO: lambda c, ch: c.response(body=c.body_bytes())})
    conn = Connection(dispatcher, default_codec(64 << 20), server_side=True)
    transport = _TlsTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    assert conn.tls
    conn.data_received(_requests(ECHO, 3, body=b"payload"))
    fut = conn.send_request(Command(ECHO, 0, 0, None, {"k": "v"}, b"body"), 5.0)
    assert fut is not None
    assert len(transport.writes) == 2  # the three answers of one read, then the request
    assert [a.opaque for a in _decoded(transport.writes[:1])] == [1, 2, 3]
    (request,) = _decoded(transport.writes[1:])
    assert (request.ext, request.body_bytes()) == ({"k": "v"}, b"body")
    conn.abandon(request.opaque)
    conn.connection_lost(None)
