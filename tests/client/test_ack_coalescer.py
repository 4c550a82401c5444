"""AckCoalescer: acks of one loop turn go as one request per key; each caller gets its own outcome."""

from __future__ import annotations

import asyncio

import pytest

from pymq.client.ack_coalescer import AckCoalescer
from pymq.errors import InvalidReceiptHandleError, RemoteError
from pymq.protocol.codes import ResponseCode


class FakeBroker:
    """Records each request's (address, topic, handles); refuses handles starting with ``bad``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, list[str]]] = []
        self.gate: asyncio.Event | None = None
        self.fail: BaseException | None = None

    async def send(self, addr: str, topic: str, handles: list[str]) -> list[BaseException | None]:
        self.requests.append((addr, topic, handles))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [
            InvalidReceiptHandleError(ResponseCode.INVALID_RECEIPT_HANDLE, f"expired: {h}", addr)
            if h.startswith("bad")
            else None
            for h in handles
        ]


async def turns() -> None:
    """Let the loop run a few turns (the flush, then its request task, start)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_acks_of_one_turn_go_as_one_request_per_address_and_topic() -> None:
    broker = FakeBroker()
    acks = AckCoalescer(broker.send)
    await asyncio.gather(
        acks.ack("a:1", "t", "h1"),
        acks.ack("a:1", "t", "h2"),
        acks.ack("a:1", "u", "h3"),
        acks.ack("b:1", "t", "h4"),
        acks.ack("a:1", "t", "h5"),
    )
    assert sorted(broker.requests) == [
        ("a:1", "t", ["h1", "h2", "h5"]),
        ("a:1", "u", ["h3"]),
        ("b:1", "t", ["h4"]),
    ]
    await acks.ack("a:1", "t", "h6")  # alone: a request of its own at once
    assert broker.requests[-1] == ("a:1", "t", ["h6"])


async def test_a_refused_handle_raises_for_its_caller_only() -> None:
    broker = FakeBroker()
    acks = AckCoalescer(broker.send)
    results = await asyncio.gather(
        acks.ack("a:1", "t", "h1"), acks.ack("a:1", "t", "bad2"), acks.ack("a:1", "t", "h3"), return_exceptions=True
    )
    assert len(broker.requests) == 1
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], InvalidReceiptHandleError) and results[1].reason == "expired"


async def test_a_failed_request_raises_for_every_caller_of_the_batch() -> None:
    broker = FakeBroker()
    broker.fail = RemoteError(ResponseCode.SYSTEM_ERROR, "broker busy", "a:1")
    acks = AckCoalescer(broker.send)
    results = await asyncio.gather(acks.ack("a:1", "t", "h1"), acks.ack("a:1", "t", "h2"), return_exceptions=True)
    assert all(isinstance(r, RemoteError) and "broker busy" in str(r) for r in results)
    broker.fail = None
    await acks.ack("a:1", "t", "h3")  # the next request goes (nothing stays stuck after a failure)
    assert broker.requests[-1] == ("a:1", "t", ["h3"])


async def test_acks_made_while_a_request_is_in_flight_go_together_after_its_answer() -> None:
    broker = FakeBroker()
    broker.gate = asyncio.Event()
    acks = AckCoalescer(broker.send)
    first = asyncio.ensure_future(acks.ack("a:1", "t", "h1"))
    await turns()
    assert broker.requests == [("a:1", "t", ["h1"])]  # in flight
    later = [asyncio.ensure_future(acks.ack("a:1", "t", f"h{i}")) for i in (2, 3)]
    await turns()
    assert len(broker.requests) == 1  # waiting for the first answer
    broker.gate.set()
    await asyncio.gather(first, *later)
    assert broker.requests == [("a:1", "t", ["h1"]), ("a:1", "t", ["h2", "h3"])]


async def test_a_cancelled_caller_does_not_disturb_the_others() -> None:
    broker = FakeBroker()
    broker.gate = asyncio.Event()
    acks = AckCoalescer(broker.send)
    a = asyncio.ensure_future(acks.ack("a:1", "t", "h1"))
    b = asyncio.ensure_future(acks.ack("a:1", "t", "h2"))
    await turns()
    a.cancel()
    broker.gate.set()
    await b
    with pytest.raises(asyncio.CancelledError):
        await a
    assert broker.requests == [("a:1", "t", ["h1", "h2"])]
