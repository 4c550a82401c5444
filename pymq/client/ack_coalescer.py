"""Acks issued in one event-loop turn, sent as one request per (broker address, topic).

A receiver that acks message after message (``await consumer.ack(m)``) waits a round trip
per message; several receivers doing so at once put as many single-ack requests on the wire.
:class:`AckCoalescer` queues every ack made in the current loop turn and sends them together
once the turn is over (a sender task's first step: no timer, no added wait when an ack is
alone), as one batch request; while a key's request is in flight, its new acks wait for the answer and then go
together (as a group commit does: batches grow with the load, one request per key on the
wire, so receivers that fell out of step join the same batch again). Each caller still awaits
the broker's answer for its own message: an outcome per handle comes back, and a refused
handle (expired, already acked, forged) raises for that caller only; a failure of the whole
request (transport, broker refusal) raises for every caller of the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

#: sends (address, topic, handles) and answers one outcome per handle, in order: None when
#: acked, else the exception that handle's caller raises; raises when the whole request failed
SendAcks = Callable[[str, str, list[str]], Awaitable[list[BaseException | None]]]


class AckCoalescer:
    """Coalesces :meth:`ack` calls made in one loop turn into one :data:`SendAcks` call per key."""

    def __init__(self, send: SendAcks) -> None:
        self._send = send
        #: (address, topic) -> handles and their callers' futures, waiting for the next request
        self._pending: dict[tuple[str, str], list[tuple[str, asyncio.Future[None]]]] = {}
        #: keys with a request in flight (their pending acks go when it is answered)
        self._busy: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def ack(self, addr: str, topic: str, handle: str) -> None:
        """Ack ``handle`` of ``topic`` on ``addr`` with the other acks of this loop turn; raises
        what the broker answered for this handle (or the batch's failure)."""
        loop = asyncio.get_running_loop()
        key = (addr, topic)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = []
            if key not in self._busy:
                # the sender's first step runs after this turn's other acks joined the batch
                self._busy.add(key)
                task = loop.create_task(self._sender(key))
                self._tasks.add(task)  # (a reference until it is done: the loop keeps only weak ones)
                task.add_done_callback(self._tasks.discard)
        fut: asyncio.Future[None] = loop.create_future()
        pending.append((handle, fut))
        await fut

    async def _sender(self, key: tuple[str, str]) -> None:
        """Send the key's batches one request at a time until no ack waits (one task per busy key)."""
        addr, topic = key
        batch: list[tuple[str, asyncio.Future[None]]] = []
        try:
            while True:
                batch = self._pending.pop(key, [])
                if not batch:
                    return
                await self._send_batch(addr, topic, batch)
                batch = []
                # one loop turn: the callers just answered run first and may ack again at once,
                # joining the next batch
                await asyncio.sleep(0)
        except BaseException as exc:  # cancelled (the loop is closing): nobody may wait forever
            for _handle, fut in batch + self._pending.pop(key, []):
                if not fut.done():
                    fut.set_exception(exc)
            raise
        finally:
            self._busy.discard(key)

    async def _send_batch(self, addr: str, topic: str, batch: list[tuple[str, asyncio.Future[None]]]) -> None:
        try:
            outcomes = await self._send(addr, topic, [handle for handle, _fut in batch])
        except Exception as exc:  # the whole request failed: every caller of the batch sees it
            for _handle, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_handle, fut), outcome in zip(batch, outcomes, strict=True):
            if fut.done():  # the caller was cancelled
                continue
            if outcome is None:
                fut.set_result(None)
            else:
                fut.set_exception(outcome)
