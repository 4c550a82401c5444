"""GroupCommit (SYNC_FLUSH, loop side): one flush request in flight, waiters answered in offset order,
one timer for all timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from pymq.broker.sync_flush.group_commit import GroupCommit, on_the_loop
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from tests.helpers import CheckedThread, wait_until


class FakeFlusher:
    """Records flush requests; the test completes them from another thread, as the flusher would
    (``on_loop``: on the loop itself, as LoopSync does with the C syncer)."""

    def __init__(self, on_loop: bool = False) -> None:
        self.requests: list[tuple[int, Callable[[bool], None]]] = []
        self.flushed = 0
        self.on_loop = on_loop

    def request(self, offset: int, callback: Callable[[bool], None]) -> None:
        self.requests.append((offset, callback))

    def complete(self, index: int, ok: bool = True) -> None:
        offset, cb = self.requests[index]
        if ok:
            self.flushed = max(self.flushed, offset)
        if self.on_loop:
            cb(ok)
            return
        t = CheckedThread(cb, ok)
        t.start()
        t.result()  # a callback that raises on the flusher's thread fails the test


def response(n: int) -> Command:
    return Command(code=ResponseCode.SUCCESS, opaque=n)


@pytest.fixture(params=["flusher-thread", "on-loop"])
def flusher(request: pytest.FixtureRequest) -> FakeFlusher:
    """Both callback contracts: from the flusher thread, or on the loop (LoopSync)."""
    return FakeFlusher(on_loop=request.param == "on-loop")


def group_commit(flusher: FakeFlusher, timeout: float = 30, linger: float = 0.0) -> GroupCommit:
    request = flusher.request if flusher.on_loop else on_the_loop(flusher.request)
    return GroupCommit(request, lambda: flusher.flushed, timeout=timeout, linger=linger)


async def test_waiters_share_syncs_and_resolve_in_order(flusher: FakeFlusher) -> None:
    gc = group_commit(flusher)
    first = [gc.wait(response(i), end=100 * (i + 1)) for i in range(3)]
    await wait_until(lambda: len(flusher.requests) == 1, what="one request for the tick")
    assert flusher.requests[0][0] == 300  # up to the highest end waiting
    # Sends arriving while that sync runs queue one more request behind it (no loop round trip
    # between the two syncs)...
    later = [gc.wait(response(10 + i), end=400 + i) for i in range(2)]
    await wait_until(lambda: len(flusher.requests) == 2, what="the queued request")
    assert flusher.requests[1][0] == 401
    # ...and with two out, the next ones wait for a slot.
    last = gc.wait(response(20), end=500)
    await asyncio.sleep(0)
    assert len(flusher.requests) == 2
    flusher.complete(0)
    results = await asyncio.gather(*first)
    assert [r.opaque for r in results] == [0, 1, 2] and all(r.code == ResponseCode.SUCCESS for r in results)
    assert not any(f.done() for f in later)
    await wait_until(lambda: len(flusher.requests) == 3, what="a request for the last waiter")
    assert flusher.requests[2][0] == 500
    flusher.complete(1)
    assert [r.opaque for r in await asyncio.gather(*later)] == [10, 11]
    assert not last.done()
    flusher.complete(2)
    assert (await last).opaque == 20
    assert gc.waiting == 0 and gc.requests == 3


async def test_a_sync_covering_more_answers_everyone_it_covers() -> None:
    flusher = FakeFlusher()
    gc = GroupCommit(on_the_loop(flusher.request), lambda: flusher.flushed, timeout=30)
    a = gc.wait(response(1), end=100)
    await wait_until(lambda: len(flusher.requests) == 1, what="request")
    b = gc.wait(response(2), end=200)
    await wait_until(lambda: len(flusher.requests) == 2, what="queued request")
    flusher.flushed = 200  # the first sync found the second send's bytes written too
    flusher.complete(0)
    assert [(await a).opaque, (await b).opaque] == [1, 2]


async def test_a_failed_sync_answers_flush_disk_timeout_for_what_it_covered(flusher: FakeFlusher) -> None:
    gc = group_commit(flusher)
    fut = gc.wait(response(1), end=50)
    await wait_until(lambda: len(flusher.requests) == 1, what="request")
    flusher.complete(0, ok=False)
    r = await fut
    assert r.code == ResponseCode.FLUSH_DISK_TIMEOUT and "disk flush" in (r.remark or "")


async def test_timeouts_need_one_timer_and_answer_in_arrival_order() -> None:
    flusher = FakeFlusher()  # never completes
    gc = GroupCommit(on_the_loop(flusher.request), lambda: flusher.flushed, timeout=0.2)
    futs = [gc.wait(response(i), end=10 * (i + 1)) for i in range(50)]
    assert gc._timer is not None  # one timer for all 50
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert [r.opaque for r in results] == list(range(50))
    assert all(r.code == ResponseCode.FLUSH_DISK_TIMEOUT for r in results)
    assert gc._timer is None and gc.waiting == 0
    # A sync finishing late answers nobody twice, and the next waiter gets a new request.
    flusher.complete(0)
    await wait_until(lambda: gc._in_flight == 0, what="the late sync handled")
    fut = gc.wait(response(99), end=600)
    await wait_until(lambda: len(flusher.requests) == 2, what="a new request")
    flusher.complete(1)
    assert (await fut).code == ResponseCode.SUCCESS


async def test_lingering_gathers_the_answered_senders_into_the_next_sync(flusher: FakeFlusher) -> None:
    """With linger on, the sync after one that answered some senders waits for them to send again."""
    gc = group_commit(flusher, linger=5.0)
    group_a = [gc.wait(response(i), end=100 * (i + 1)) for i in range(2)]
    await wait_until(lambda: len(flusher.requests) == 1, what="the first sync")
    group_b = [gc.wait(response(10 + i), end=300 + i) for i in range(2)]  # sent during A's sync
    await asyncio.sleep(0)
    assert len(flusher.requests) == 1  # lingering: one sync at a time, nothing queued behind it
    flusher.complete(0)
    assert [r.opaque for r in await asyncio.gather(*group_a)] == [0, 1]
    for _ in range(5):
        await asyncio.sleep(0)
    assert gc.expected == 4 and len(flusher.requests) == 1  # waiting for A's senders to come back
    again = [gc.wait(response(20 + i), end=400 + i) for i in range(2)]
    await wait_until(lambda: len(flusher.requests) == 2, what="one sync for all four")
    assert flusher.requests[1][0] == 401
    flusher.complete(1)
    assert [r.opaque for r in await asyncio.gather(*group_b, *again)] == [10, 11, 20, 21]


async def test_lingering_stops_after_about_one_sync_when_senders_do_not_come_back() -> None:
    flusher = FakeFlusher()
    gc = GroupCommit(on_the_loop(flusher.request), lambda: flusher.flushed, timeout=30, linger=5.0)
    first = [gc.wait(response(i), end=100 * (i + 1)) for i in range(3)]
    await wait_until(lambda: len(flusher.requests) == 1, what="the first sync")
    late = gc.wait(response(9), end=900)
    await asyncio.sleep(0.05)  # the sync takes ~50 ms: the linger is bounded by that, not by 5 s
    flusher.complete(0)
    await asyncio.gather(*first)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await wait_until(lambda: len(flusher.requests) == 2, timeout=3, what="the sync for the one left")
    assert loop.time() - t0 < 1.0
    flusher.complete(1)
    assert (await late).code == ResponseCode.SUCCESS


async def test_lingering_waits_for_a_whole_answered_group_to_come_back(flusher: FakeFlusher) -> None:
    """A sync that answered everyone: the first sender back waits for the others (one sync for the group)."""
    gc = group_commit(flusher, linger=5.0)
    group = [gc.wait(response(i), end=100 * (i + 1)) for i in range(3)]
    await wait_until(lambda: len(flusher.requests) == 1, what="the first sync")
    await asyncio.sleep(0.02)  # (a sync of ~20 ms: the linger window below is bounded by it)
    flusher.complete(0)
    await asyncio.gather(*group)
    assert gc.expected == 3 and gc.waiting == 0
    back = [gc.wait(response(10), end=400)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(flusher.requests) == 1  # the first one back lingers for the other two
    back += [gc.wait(response(11 + i), end=500 + 100 * i) for i in range(2)]
    await wait_until(lambda: len(flusher.requests) == 2, what="one sync for the whole group")
    assert flusher.requests[1][0] == 600
    flusher.complete(1)
    assert [r.opaque for r in await asyncio.gather(*back)] == [10, 11, 12]


@pytest.mark.parametrize("spread", [0.05, 0.0])
async def test_the_linger_window_is_twice_how_long_groups_took_to_come_back(spread: float) -> None:
    """A group coming back over 30 ms: one sync when recent groups took 50 ms, else the window is one sync."""
    flusher = FakeFlusher(on_loop=True)
    gc = group_commit(flusher, linger=5.0)
    group = [gc.wait(response(i), end=100 * (i + 1)) for i in range(3)]
    await wait_until(lambda: len(flusher.requests) == 1, what="the first sync")
    flusher.complete(0)
    await asyncio.gather(*group)
    gc.sync_time, gc.spread = 0.001, spread  # syncs of 1 ms; groups seen whole after `spread`
    back = [gc.wait(response(10), end=400)]
    await asyncio.sleep(0.03)
    back += [gc.wait(response(11 + i), end=500 + 100 * i) for i in range(2)]
    await wait_until(lambda: len(flusher.requests) >= 2, what="a sync for the senders back")
    for _ in range(5):
        await asyncio.sleep(0)
    if spread:
        assert [r[0] for r in flusher.requests[1:]] == [600]  # all three in one sync
    else:
        assert flusher.requests[1][0] == 400  # the first one back alone, after ~1 ms
    while len(flusher.requests) > 1 and not all(f.done() for f in back):
        flusher.complete(len(flusher.requests) - 1)
        await asyncio.sleep(0.01)
    assert [r.opaque for r in await asyncio.gather(*back)] == [10, 11, 12]


async def test_a_linger_that_sees_its_group_whole_measures_how_long_that_took() -> None:
    flusher = FakeFlusher(on_loop=True)
    gc = group_commit(flusher, linger=5.0)
    group = [gc.wait(response(i), end=100 * (i + 1)) for i in range(3)]
    await wait_until(lambda: len(flusher.requests) == 1, what="the first sync")
    await asyncio.sleep(0.1)  # a sync of ~100 ms: the first window
    flusher.complete(0)
    await asyncio.gather(*group)
    assert gc.spread == 0.0
    back = [gc.wait(response(10), end=400)]
    await asyncio.sleep(0.02)
    back += [gc.wait(response(11 + i), end=500 + 100 * i) for i in range(2)]
    await wait_until(lambda: len(flusher.requests) == 2, what="one sync for the group")
    assert flusher.requests[1][0] == 600
    assert 0.015 <= gc.spread < 0.09  # ~20 ms from the first one back to the whole group
    flusher.complete(1)
    await asyncio.gather(*back)


async def test_a_sender_after_an_idle_pause_is_synced_at_once(flusher: FakeFlusher) -> None:
    """No group to wait for once the pause since everyone was answered is longer than the linger."""
    gc = group_commit(flusher, linger=0.01)
    group = [gc.wait(response(i), end=100 * (i + 1)) for i in range(3)]
    await wait_until(lambda: len(flusher.requests) == 1, what="the first sync")
    flusher.complete(0)
    await asyncio.gather(*group)
    await asyncio.sleep(0.1)  # idle: longer than a sync plus the linger
    late = gc.wait(response(9), end=900)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(flusher.requests) == 2 and gc.expected == 1
    flusher.complete(1)
    assert (await late).code == ResponseCode.SUCCESS


async def test_a_request_that_raises_is_asked_again_by_the_next_waiter() -> None:
    """A flush request that fails to go out leaves nothing in flight: later waiters still get syncs."""
    flusher = FakeFlusher(on_loop=True)
    calls = 0

    def flaky(offset: int, callback: Callable[[bool], None]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        flusher.request(offset, callback)

    gc = GroupCommit(flaky, lambda: flusher.flushed, timeout=30, linger=0.0005)
    first = gc.wait(response(1), end=100)
    await asyncio.sleep(0)  # the kick raises (the loop logs it)
    await asyncio.sleep(0)
    second = gc.wait(response(2), end=200)
    await wait_until(lambda: len(flusher.requests) == 1, what="a request for both")
    assert flusher.requests[0][0] == 200
    flusher.complete(0)
    assert [r.opaque for r in await asyncio.gather(first, second)] == [1, 2]


def count_polls(gc: GroupCommit) -> list[int]:
    """Count the loop's polls while a sync runs (GroupCommit._poll, wrapped on this instance)."""
    polls = [0]
    poll = gc._poll

    def counted() -> None:
        polls[0] += 1
        poll()

    gc._poll = counted  # type: ignore[method-assign]
    return polls


async def test_the_loop_polls_while_a_lingering_sync_runs_and_stops_once_answered(flusher: FakeFlusher) -> None:
    gc = group_commit(flusher, linger=5.0)
    polls = count_polls(gc)
    fut = gc.wait(response(1), end=100)
    await wait_until(lambda: len(flusher.requests) == 1, what="the sync asked for")
    await asyncio.sleep(0.02)
    assert polls[0] > 10  # the loop kept polling (it still serves everything else meanwhile)
    flusher.complete(0)
    assert (await fut).code == ResponseCode.SUCCESS
    await asyncio.sleep(0.01)
    stopped = polls[0]
    await asyncio.sleep(0.02)
    assert polls[0] == stopped and not gc._polling


async def test_polling_is_bounded_when_the_sync_does_not_answer(flusher: FakeFlusher) -> None:
    gc = group_commit(flusher, linger=0.01)
    polls = count_polls(gc)
    gc.wait(response(1), end=100)
    await wait_until(lambda: len(flusher.requests) == 1, what="the sync asked for")
    await asyncio.sleep(0.05)  # past the bound (the linger: no sync time measured yet)
    stopped = polls[0]
    await asyncio.sleep(0.02)
    assert stopped > 0 and polls[0] == stopped and not gc._polling
    flusher.complete(0)


async def test_no_polling_without_lingering(flusher: FakeFlusher) -> None:
    gc = group_commit(flusher, linger=0.0)
    polls = count_polls(gc)
    gc.wait(response(1), end=100)
    await wait_until(lambda: len(flusher.requests) == 1, what="the sync asked for")
    await asyncio.sleep(0.01)
    assert polls[0] == 0
    flusher.complete(0)
