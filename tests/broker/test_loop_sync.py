"""LoopSync (SYNC_FLUSH through the store's C syncer): callbacks on the loop, never re-entrant, answered at close.

With a real store; the group commit on top of it is covered by tests/broker/test_sync_flush.py
(which runs both the C path and the flusher thread's).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pymq.broker.store import MessageStore
from pymq.broker.sync_flush.group_commit import GroupCommit
from pymq.broker.sync_flush.loop_sync import LoopSync
from pymq.config import FlushDiskType
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from tests.helpers import wait_until
from tests.store.storeutil import keyed, open_store, use_c_syncer

SYNC = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "flush_interval_ms": 60_000, "flush_thorough_interval_ms": 60_000}


@pytest.fixture(autouse=True)
def c_syncer(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the C syncer (see storeutil.use_c_syncer)."""
    use_c_syncer(monkeypatch)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = open_store(tmp_path / "store", **SYNC)
    yield s
    s.halt()


def put(store: MessageStore, i: int) -> int:
    r = store.put("T", 0, keyed(i, size=500))[0]
    return r.physical_offset + r.size


class Answers:
    """Callbacks that record (ok, thread, the store's flushed offset then)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.got: list[tuple[bool, int, int]] = []

    def __call__(self, ok: bool) -> None:
        self.got.append((ok, threading.get_ident(), self.store.flushed_offset))


async def test_syncs_are_answered_on_the_loop_after_the_data_is_durable(store: MessageStore) -> None:
    ls = LoopSync.for_store(store)
    assert ls is not None
    answers = Answers(store)
    ends = [put(store, i) for i in range(5)]
    ls.request(ends[-1], answers)
    assert answers.got == []  # never from inside request()
    await wait_until(lambda: len(answers.got) == 1, what="the sync's answer")
    ok, thread, flushed = answers.got[0]
    assert ok and thread == threading.get_ident() and flushed >= ends[-1]
    assert store.checkpoint.flushed_phys >= ends[-1]
    ls.request(ends[0], answers)  # durable already: no job, answered on the next loop turn
    assert len(answers.got) == 1
    await wait_until(lambda: len(answers.got) == 2, what="the immediate answer")
    assert answers.got[1][0] and ls.submitted == 1
    ls.request(10**12, answers)  # past the end: cannot be made durable
    await wait_until(lambda: len(answers.got) == 3, what="the refusal")
    assert answers.got[2][0] is False
    ls.close()


async def test_close_answers_the_jobs_still_out_then_refuses(store: MessageStore) -> None:
    ls = LoopSync.for_store(store)
    assert ls is not None
    answers = Answers(store)
    end = put(store, 1)
    ls.request(end, answers)
    ls.close()  # the job was queued: close lets it finish and answers it here
    assert [a[0] for a in answers.got] == [True] and answers.got[0][2] >= end
    ls.request(put(store, 2), answers)
    await wait_until(lambda: len(answers.got) == 2, what="the refusal after close")
    assert answers.got[1][0] is False
    ls.close()  # idempotent
    store.shutdown()  # the store closes the (closed) syncer again: fine


async def test_group_commit_on_the_loop_path(store: MessageStore) -> None:
    """GroupCommit with LoopSync: concurrent waiters share syncs, all SUCCESS once durable."""
    ls = LoopSync.for_store(store)
    assert ls is not None
    gc = GroupCommit(ls.request, lambda: store.flushed_offset, timeout=30)
    futures = []
    for i in range(30):
        end = put(store, i)
        futures.append(gc.wait(Command(code=ResponseCode.SUCCESS, opaque=i), end))
        if i % 7 == 0:
            await asyncio.sleep(0)  # let some syncs start in between
    results = await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert [r.opaque for r in results] == list(range(30))
    assert all(r.code == ResponseCode.SUCCESS for r in results)
    assert store.flushed_offset >= end
    assert 1 <= ls.submitted <= gc.requests < 30
    ls.close()


async def test_a_request_after_the_store_stopped_is_refused(store: MessageStore) -> None:
    ls = LoopSync.for_store(store)
    assert ls is not None
    end = put(store, 1)
    store.shutdown()  # closes the syncer before the loop ever watched it
    answers = Answers(store)
    ls.request(end + 1, answers)
    await wait_until(lambda: len(answers.got) == 1, what="the refusal")
    assert answers.got[0][0] is False
    ls.close()


async def test_unexpected_errors_answer_false_and_recording_failures_still_answer(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither a failing plan nor a failing record strands a request (the group commit would stop syncing)."""
    ls = LoopSync.for_store(store)
    assert ls is not None
    answers = Answers(store)
    end = put(store, 1)

    def broken_plan(upto: int) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(store, "sync_plan", broken_plan)
    ls.request(end, answers)
    await wait_until(lambda: len(answers.got) == 1, what="the refusal")
    assert answers.got[0][0] is False
    monkeypatch.undo()

    def broken_done(plan: object, ok: bool, *, blocking: bool = True) -> bool:
        raise ValueError("boom")

    monkeypatch.setattr(store, "sync_done", broken_done)
    ls.request(put(store, 2), answers)
    await wait_until(lambda: len(answers.got) == 2, what="the answer despite the failed record")
    assert answers.got[1][0] is True
    monkeypatch.undo()
    ls.close()
