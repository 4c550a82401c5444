"""The rebalance decision and queue ownership, without a consumer, a broker or sleeps."""

from __future__ import annotations

import asyncio

from pymq.client.allocate import AllocateAveragely
from pymq.client.consumer_types import MessageModel
from pymq.client.process_queue import ProcessQueue
from pymq.client.rebalance import QueueOwnership, assign
from pymq.protocol.route import MessageQueue
from pymq.testing import FakeClock

QUEUES = [MessageQueue("orders", "broker-a", i) for i in range(4)]


def test_assign_clustering_gives_this_client_its_share() -> None:
    mine = assign(MessageModel.CLUSTERING, AllocateAveragely(), "g", "c2", QUEUES, ["c1", "c2"])
    assert mine == set(QUEUES[2:])


def test_assign_broadcasting_takes_every_queue_and_needs_no_members() -> None:
    assert assign(MessageModel.BROADCASTING, AllocateAveragely(), "g", "c1", QUEUES, []) == set(QUEUES)


def test_assign_without_members_keeps_the_current_queues() -> None:
    assert assign(MessageModel.CLUSTERING, AllocateAveragely(), "g", "c1", QUEUES, []) is None


class Hooks:
    """Records the order of hook calls; refuses the queues in ``refuse`` (like a failed orderly lock)."""

    def __init__(self, log: list[str], refuse: set[MessageQueue], keep: frozenset[MessageQueue] = frozenset()) -> None:
        self.log = log
        self.refuse = refuse
        #: queues that may not be given up (an orderly queue whose master is away)
        self.keep = keep

    async def can_take(self, mq: MessageQueue) -> bool:
        self.log.append(f"can_take {mq.queueId}")
        return mq not in self.refuse

    def queue_taken(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.log.append(f"taken {mq.queueId}")

    def can_release(self, mq: MessageQueue) -> bool:
        return mq not in self.keep

    async def queue_released(self, mq: MessageQueue, pq: ProcessQueue | None) -> None:
        self.log.append(f"released {mq.queueId}")

    async def after_queue_released(self, mq: MessageQueue) -> None:
        self.log.append(f"after_released {mq.queueId}")


async def test_ownership_takes_allowed_queues_and_releases_in_order() -> None:
    log: list[str] = []
    pulls: dict[int, int] = {}
    clock = FakeClock()

    async def start_offsets(mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        return {mq: 10 * mq.queueId for mq in mqs}

    async def commit(mq: MessageQueue) -> None:
        log.append(f"commit {mq.queueId}")

    async def pull(mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        pulls[mq.queueId] = offset
        await asyncio.Event().wait()  # pulls until cancelled

    own = QueueOwnership("g", clock, start_offsets=start_offsets, commit=commit, pull=pull)
    own.hooks = Hooks(log, refuse={QUEUES[1]})
    await own.update("orders", set(QUEUES[:3]))
    await asyncio.sleep(0)
    assert sorted(own.process_queues) == [QUEUES[0], QUEUES[2]]
    assert pulls == {0: 0, 2: 20}
    assert own.process_queues[QUEUES[0]].last_pull_time == clock.monotonic()  # process queues run on the clock

    log.clear()
    pq0 = own.process_queues[QUEUES[0]]
    await own.update("orders", {QUEUES[2], QUEUES[3]})
    assert pq0.dropped and own.pull_tasks.keys() == {QUEUES[2], QUEUES[3]}
    # Pulling stops, the consumption side finishes, the offset is committed, then the lock goes.
    assert log == ["released 0", "commit 0", "after_released 0", "can_take 3", "taken 3"]

    own.closing = True
    await own.update("orders", set(QUEUES))  # closing: nothing more is taken
    assert sorted(own.process_queues) == [QUEUES[2], QUEUES[3]]
    await own.stop_all()
    assert own.pull_tasks == {}


async def test_a_queue_that_may_not_be_released_is_kept_until_it_may() -> None:
    """An orderly queue whose master is away is neither released nor committed until the master is back."""
    log: list[str] = []

    async def start_offsets(mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        return dict.fromkeys(mqs, 0)

    async def commit(mq: MessageQueue) -> None:
        log.append(f"commit {mq.queueId}")

    async def pull(mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        await asyncio.Event().wait()

    own = QueueOwnership("g", FakeClock(), start_offsets=start_offsets, commit=commit, pull=pull)
    hooks = Hooks(log, refuse=set(), keep=frozenset({QUEUES[0]}))
    own.hooks = hooks
    await own.update("orders", {QUEUES[0], QUEUES[1]})
    log.clear()
    await own.update("orders", set())
    assert sorted(own.process_queues) == [QUEUES[0]]  # kept, still owned
    assert log == ["released 1", "commit 1", "after_released 1"]
    log.clear()
    hooks.keep = frozenset()  # the master is back
    await own.update("orders", set())
    assert own.process_queues == {} and log == ["released 0", "commit 0", "after_released 0"]
    await own.stop_all()
