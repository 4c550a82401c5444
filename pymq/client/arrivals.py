"""Waiting for messages on idle queues: a few WAIT_QUEUE_ARRIVAL requests per broker (issue 36).

A consumer of thousands of queues would hold one long-polling pull per idle queue. Instead
a queue whose pull found nothing waits here: its ``(queue, offset)`` joins the broker's
pending set, and rounds of up to :data:`BATCH` queues go out as one held request each. The
broker answers a round when any of its queues has a message (or after the suspend time);
those queues' pull loops wake and pull, and the round's other queues join the next round.

New waits are gathered for a moment before a round goes out (longer while many rounds are
out), so a burst of queues going idle makes a few big rounds, not many small ones; and at
most :data:`MAX_ROUNDS` rounds per broker are out at once (the rest wait for one to end).
No message is missed between a pull and its wait: the broker answers at once for a queue
already past the offset the wait carries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from pymq.client import broker_api
from pymq.client.instance import ClientInstance
from pymq.errors import PymqError, RemoteError
from pymq.logs import get_logger
from pymq.protocol.codes import ResponseCode
from pymq.protocol.route import MessageQueue

log = get_logger("client.arrivals")

#: queues per WAIT_QUEUE_ARRIVAL: an answer re-sends the rest of its round, so rounds stay small
BATCH = 256
#: rounds out at once per broker (BATCH * MAX_ROUNDS queues waiting on the broker)
MAX_ROUNDS = 256
#: how long new waits are gathered before a round goes out, per round already out (capped)
GATHER_PER_ROUND = 0.001
GATHER_MAX = 0.2


@dataclass(slots=True)
class _Broker:
    #: queues waiting for a round: their offset and the future their pull loop awaits
    pending: dict[MessageQueue, tuple[int, asyncio.Future[bool]]] = field(default_factory=dict)
    rounds: int = 0
    flush: asyncio.TimerHandle | None = None


class ArrivalWaiter:
    """One consumer's waits for messages, per broker address."""

    def __init__(
        self,
        instance: ClientInstance,
        group: str,
        *,
        suspend_ms: int,
        timeout: float,
        locate: Callable[[MessageQueue], str | None] = lambda _mq: None,
    ) -> None:
        self.instance = instance
        #: where a queue is pulled from now: a queue whose broker changed (a master back, a
        #: slave suggested) stops waiting on the old one and pulls
        self.locate = locate
        self.group = group
        self.suspend_ms = suspend_ms
        self.timeout = timeout
        self._brokers: dict[str, _Broker] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: brokers that do not serve WAIT_QUEUE_ARRIVAL (their queues long-poll as before)
        self.unsupported: set[str] = set()

    async def wait(self, addr: str, mq: MessageQueue, offset: int) -> bool:
        """Until ``mq`` has a message at ``offset`` on ``addr`` (True), or the wait failed (False:
        pull with long polling instead). Cancelling the caller withdraws the wait."""
        if addr in self.unsupported:
            return False
        b = self._brokers.get(addr)
        if b is None:
            b = self._brokers[addr] = _Broker()
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        old = b.pending.get(mq)
        if old is not None and not old[1].done():
            old[1].cancel()  # a restarted queue: its old loop is gone
        b.pending[mq] = (offset, fut)
        self._schedule(addr, b)
        try:
            return await fut
        finally:
            entry = b.pending.get(mq)
            if entry is not None and entry[1] is fut:
                del b.pending[mq]

    def _schedule(self, addr: str, b: _Broker) -> None:
        if b.flush is None and b.pending and b.rounds < MAX_ROUNDS:
            delay = min(GATHER_MAX, GATHER_PER_ROUND * (1 + b.rounds))
            b.flush = asyncio.get_running_loop().call_later(delay, self._flush, addr, b)

    def _flush(self, addr: str, b: _Broker) -> None:
        b.flush = None
        while b.pending and b.rounds < MAX_ROUNDS:
            batch: list[tuple[MessageQueue, int, asyncio.Future[bool]]] = []
            for mq in list(b.pending)[:BATCH]:
                offset, fut = b.pending.pop(mq)
                if not fut.done():
                    batch.append((mq, offset, fut))
            if not batch:
                continue
            b.rounds += 1
            task = asyncio.ensure_future(self._round(addr, b, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _round(self, addr: str, b: _Broker, batch: list[tuple[MessageQueue, int, asyncio.Future[bool]]]) -> None:
        ready: set[int] = set()
        failed = False
        try:
            waits = [(mq.topic, mq.queueId, offset) for mq, offset, _ in batch]
            cmd = broker_api.wait_queue_arrival(self.group, waits, self.suspend_ms)
            resp = await self.instance.rpc.invoke_ok(addr, cmd, self.timeout)
            ready = set(broker_api.read_ready(resp))
        except asyncio.CancelledError:
            for _mq, _offset, fut in batch:
                fut.cancel()  # closed: its waiters stop waiting too
            raise
        except PymqError as exc:
            failed = True
            if isinstance(exc, RemoteError) and exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                self.unsupported.add(addr)  # an older broker
            log.info("arrival_wait_failed", group=self.group, broker=addr, queues=len(batch), reason=str(exc))
        finally:
            b.rounds -= 1
        for i, (mq, offset, fut) in enumerate(batch):
            if fut.done():
                continue  # withdrawn (queue dropped or restarted)
            if failed or i in ready:
                fut.set_result(not failed)
            elif self.locate(mq) not in (None, addr):
                fut.set_result(True)  # pulled from elsewhere now: pull there (and wait there)
            elif mq not in b.pending:
                b.pending[mq] = (offset, fut)  # nothing yet: into the next round
        self._schedule(addr, b)

    @property
    def rounds(self) -> int:
        """Wait requests out now, over all brokers."""
        return sum(b.rounds for b in self._brokers.values())

    def close(self) -> None:
        """Withdraw every wait (the consumer closes)."""
        for b in self._brokers.values():
            if b.flush is not None:
                b.flush.cancel()
                b.flush = None
            for _offset, fut in b.pending.values():
                if not fut.done():
                    fut.cancel()
            b.pending.clear()
        for task in self._tasks:
            task.cancel()
