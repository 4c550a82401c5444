"""Queue ownership for consumers: which queues this client takes, and taking or giving them up.

Two parts, both free of the consumer itself:

* :func:`assign` is the rebalance decision: given a topic's readable queues and the group's
  members, the queues this client owns (all of them when broadcasting; the allocation
  strategy's share when clustering; None to keep what it has when no broker answered).
* :class:`QueueOwnership` holds the owned queues (a :class:`ProcessQueue` and a pull task
  each) and applies a decision: a queue taken away stops pulling, has its offset committed
  and its cache dropped; a queue gained starts from its start offset. What the consumption
  side must do around that (orderly: lock first, finish the batch, unlock after) comes
  through :class:`QueueHooks`, which a :class:`~pymq.client.consume_service.ConsumeService`
  implements.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from pymq.client.allocate import AllocateStrategy
from pymq.client.consumer_types import MessageModel
from pymq.client.process_queue import ProcessQueue
from pymq.clock import Clock
from pymq.logs import get_logger
from pymq.protocol.route import MessageQueue

log = get_logger("client.rebalance")

__all__ = ["NO_HOOKS", "NoQueueHooks", "QueueHooks", "QueueOwnership", "assign"]


def assign(
    model: MessageModel,
    strategy: AllocateStrategy,
    group: str,
    client_id: str,
    queues: list[MessageQueue],
    members: list[str],
) -> set[MessageQueue] | None:
    """The queues of one topic this client should own; None: keep the current ones (no member list)."""
    if model is MessageModel.BROADCASTING:
        return set(queues)
    if not members:
        return None  # no broker answered: keep what we have
    return set(strategy.allocate(group, client_id, queues, members))


class QueueHooks(Protocol):
    """What the consumption side does when a queue changes hands."""

    async def can_take(self, mq: MessageQueue) -> bool:
        """May the queue be taken now (orderly: once its broker lock is held)?"""
        ...

    def queue_taken(self, mq: MessageQueue, pq: ProcessQueue) -> None: ...

    def can_release(self, mq: MessageQueue) -> bool:
        """May the queue be given up now (orderly: not while its master, holder of the lock
        and of the offsets, is gone: the queue is kept, paused, until it is back)?"""
        ...

    async def queue_released(self, mq: MessageQueue, pq: ProcessQueue | None) -> None:
        """Pulling stopped, before the offset is committed (orderly: let the batch finish)."""
        ...

    async def after_queue_released(self, mq: MessageQueue) -> None:
        """The offset is committed (orderly: release the broker lock)."""
        ...


class NoQueueHooks:
    """Queue hooks that do nothing: take any queue at once, release it with no extra step."""

    async def can_take(self, mq: MessageQueue) -> bool:
        return True

    def queue_taken(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        return None

    def can_release(self, mq: MessageQueue) -> bool:
        return True

    async def queue_released(self, mq: MessageQueue, pq: ProcessQueue | None) -> None:
        return None

    async def after_queue_released(self, mq: MessageQueue) -> None:
        return None


#: hooks that do nothing (pull consumers, concurrent push consumers need none)
NO_HOOKS: QueueHooks = NoQueueHooks()

PullLoop = Callable[[MessageQueue, ProcessQueue, int], Coroutine[Any, Any, None]]


class QueueOwnership:
    """The queues one consumer owns, each with a process queue and a pull task.

    ``start_offsets(mqs)`` says where taken queues start (missing or negative: do not take it),
    ``commit(mq)`` commits a released queue's offset and forgets it, and ``pull(mq, pq,
    offset)`` is the pull loop run for each owned queue.
    """

    def __init__(
        self,
        group: str,
        clock: Clock,
        *,
        start_offsets: Callable[[list[MessageQueue]], Awaitable[dict[MessageQueue, int]]],
        commit: Callable[[MessageQueue], Awaitable[None]],
        pull: PullLoop,
    ) -> None:
        self.group = group
        self.clock = clock
        self.hooks: QueueHooks = NO_HOOKS
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        #: set when the consumer closes: a rebalance under way takes nothing more
        self.closing = False
        self._start_offsets = start_offsets
        self._commit = commit
        self._pull = pull

    async def update(self, topic: str, mine: set[MessageQueue]) -> None:
        """Own exactly ``mine`` among ``topic``'s queues."""
        current = {mq for mq in self.process_queues if mq.topic == topic}
        for mq in sorted(current - mine):
            if not self.hooks.can_release(mq):
                log.info("queue_release_deferred", group=self.group, queue=str(mq), reason="master away")
                continue
            await self.release(mq)
        taken = []
        for mq in sorted(mine - current):
            if self.closing:
                break  # close() is waiting for this rebalance: take nothing more
            # Lock first, then read the offset (as RocketMQ does): a previous orderly owner
            # commits before it unlocks, so its last commit is in once the lock is ours.
            if await self.hooks.can_take(mq):
                taken.append(mq)
        # One request per broker for all of their offsets, not a round trip or two per queue (issue 36).
        offsets = await self._start_offsets(taken) if taken and not self.closing else {}
        for mq in taken:
            offset = offsets.get(mq, -1)
            if offset < 0 or self.closing:
                await self.hooks.after_queue_released(mq)  # not taken after all: give the lock back
                continue
            pq = self._start(mq, offset)
            self.hooks.queue_taken(mq, pq)
            log.info("queue_assigned", group=self.group, queue=str(mq), offset=offset)
        if (current - mine) or (mine - current):
            log.info("rebalanced", group=self.group, topic=topic, queues=len(mine))

    def _start(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        self.process_queues[mq] = pq = ProcessQueue(self.clock)
        self.pull_tasks[mq] = asyncio.ensure_future(self._pull(mq, pq, offset))
        return pq

    async def _stop_pulling(self, mq: MessageQueue) -> ProcessQueue | None:
        pq = self.process_queues.pop(mq, None)
        task = self.pull_tasks.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        return pq

    async def release(self, mq: MessageQueue) -> None:
        """Give ``mq`` up: stop pulling, let the consumption side finish, commit, unlock."""
        pq = await self._stop_pulling(mq)
        await self.hooks.queue_released(mq, pq)
        await self._commit(mq)
        await self.hooks.after_queue_released(mq)
        log.info("queue_released", group=self.group, queue=str(mq))

    async def restart(self, mq: MessageQueue, offset: int) -> None:
        """Pull ``mq`` again from ``offset`` with a fresh process queue (seek, offset reset); nothing is committed."""
        await self._stop_pulling(mq)
        self._start(mq, offset)

    async def stop_all(self) -> None:
        """Stop every pull task (close); the process queues stay for the final commit."""
        for task in self.pull_tasks.values():
            task.cancel()
        for task in list(self.pull_tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.pull_tasks.clear()
