"""The consumer's ArrivalWaiter (issue 36): idle queues wait in a few rounds, driven by a fake broker."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from pymq.client import arrivals
from pymq.client.arrivals import ArrivalWaiter
from pymq.errors import RemoteError, RequestTimeoutError
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests_many import read_queues
from pymq.protocol.route import MessageQueue

ADDR = "127.0.0.1:1"


class _Rpc:
    """Answers each WAIT_QUEUE_ARRIVAL with what the test puts in ``answers`` (a ready list or an error)."""

    def __init__(self) -> None:
        self.rounds: list[list[tuple[str, int, int]]] = []
        self.answers: asyncio.Queue[list[int] | Exception] = asyncio.Queue()

    async def invoke_ok(self, addr: str, cmd: Command, timeout: float) -> Command:
        self.rounds.append(read_queues(cmd.body, with_offset=True))
        answer = await self.answers.get()
        if isinstance(answer, Exception):
            raise answer
        return cmd.response(body=encode_body({"ready": answer}))


def _waiter(rpc: _Rpc, locate: Any = lambda _mq: None) -> ArrivalWaiter:
    inst = cast(Any, type("Inst", (), {"rpc": rpc})())
    return ArrivalWaiter(inst, "g", suspend_ms=1000, timeout=5.0, locate=locate)


def _mqs(n: int) -> list[MessageQueue]:
    return [MessageQueue("t", "b", q) for q in range(n)]


async def _until(cond: Any) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition not reached")


async def test_waits_go_out_in_rounds_and_only_ready_queues_wake() -> None:
    rpc = _Rpc()
    w = _waiter(rpc)
    mqs = _mqs(arrivals.BATCH + 10)
    waits = [asyncio.ensure_future(w.wait(ADDR, mq, 7)) for mq in mqs]
    await _until(lambda: len(rpc.rounds) == 2)
    assert [len(r) for r in rpc.rounds] == [arrivals.BATCH, 10]  # gathered, not one request per queue
    assert rpc.rounds[0][0] == ("t", 0, 7) and w.rounds == 2
    rpc.answers.put_nowait([3])  # the first round: queue 3 has a message
    await _until(lambda: waits[3].done())
    assert waits[3].result() is True and not any(f.done() for i, f in enumerate(waits) if i != 3)
    await _until(lambda: len(rpc.rounds) == 3)  # the round's other queues wait again
    assert len(rpc.rounds[2]) == arrivals.BATCH - 1 and ("t", 3, 7) not in rpc.rounds[2]
    waits[5].cancel()  # a dropped queue is withdrawn
    rpc.answers.put_nowait([])  # the second round times out: its queues go round again
    await _until(lambda: len(rpc.rounds) == 4)
    rpc.answers.put_nowait(RequestTimeoutError("gone"))  # the third round fails: its queues pull
    await _until(lambda: all(waits[i].done() for i in range(arrivals.BATCH) if i != 3))
    assert {waits[i].result() for i in range(arrivals.BATCH) if i not in (3, 5)} == {False}
    await _until(lambda: len(rpc.rounds) >= 4)
    assert all(("t", 5, 7) not in r for r in rpc.rounds[3:])
    w.close()
    await asyncio.gather(*waits, return_exceptions=True)


async def test_a_broker_without_the_request_makes_its_queues_long_poll() -> None:
    rpc = _Rpc()
    w = _waiter(rpc)
    first = asyncio.ensure_future(w.wait(ADDR, _mqs(1)[0], 0))
    await _until(lambda: rpc.rounds)
    rpc.answers.put_nowait(RemoteError(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "no"))
    assert await first is False
    assert await w.wait(ADDR, _mqs(2)[1], 0) is False  # at once, no request
    assert len(rpc.rounds) == 1
    w.close()


async def test_a_queue_pulled_elsewhere_now_stops_waiting_on_the_old_broker() -> None:
    rpc = _Rpc()
    where = {"addr": ADDR}
    w = _waiter(rpc, locate=lambda _mq: where["addr"])
    fut = asyncio.ensure_future(w.wait(ADDR, _mqs(1)[0], 0))
    await _until(lambda: rpc.rounds)
    where["addr"] = "127.0.0.1:2"  # its master is back
    rpc.answers.put_nowait([])
    assert await asyncio.wait_for(fut, 1.0) is True  # wakes to pull from the new broker
    w.close()
