"""Long polling: pulls that find nothing wait here until a message lands or they time out.

A held pull is a future keyed by (topic, queueId). The store's arrival hook wakes every
pull of that queue whose offset is now below the max offset; the pull handler then reads
again and answers. A timer answers the rest when their suspend time runs out.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from pymq.clock import SYSTEM_CLOCK, Clock


class _Held:
    __slots__ = ("future", "offset")

    def __init__(self, offset: int, future: asyncio.Future[bool]) -> None:
        self.offset = offset
        self.future = future


class PullHoldService:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._held: dict[tuple[str, int], list[_Held]] = defaultdict(list)
        #: set by :meth:`wake_all` (shutdown): a hold asked for after it ends at once
        self.closed = False
        #: times the suspend timeouts (a FakeClock in tests)
        self.clock = clock

    def hold(self, topic: str, queue_id: int, offset: int, timeout: float) -> asyncio.Future[bool]:
        """A future that becomes True when the queue grows past ``offset``, False on timeout."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.closed:
            fut.set_result(False)  # shutting down: a request that comes now is not held
            return fut
        key = (topic, queue_id)
        entry = _Held(offset, fut)
        self._held[key].append(entry)
        handle = self.clock.call_later(timeout, lambda: self._expire(key, entry))
        fut.add_done_callback(lambda _f: handle.cancel())
        return fut

    def hold_many(self, waits: list[tuple[str, int, int]], timeout: float) -> asyncio.Future[bool]:
        """One future for several queues ``(topic, queueId, offset)``: True when any grows past its
        offset, False on timeout (a pop that may take from any queue of a topic waits on all)."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.closed:
            fut.set_result(False)
            return fut
        entries = []
        for topic, queue_id, offset in waits:
            key = (topic, queue_id)
            entry = _Held(offset, fut)
            self._held[key].append(entry)
            entries.append((key, entry))

        def expire() -> None:
            if not fut.done():
                fut.set_result(False)

        handle = self.clock.call_later(timeout, expire)

        def done(_f: asyncio.Future[bool]) -> None:
            handle.cancel()
            for key, entry in entries:
                self._discard(key, entry)

        fut.add_done_callback(done)
        return fut

    def _expire(self, key: tuple[str, int], entry: _Held) -> None:
        if not entry.future.done():
            entry.future.set_result(False)
        self._discard(key, entry)

    def _discard(self, key: tuple[str, int], entry: _Held) -> None:
        waiters = self._held.get(key)
        if waiters is not None:
            try:
                waiters.remove(entry)
            except ValueError:
                pass
            if not waiters:
                del self._held[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Wake the pulls of a queue that now has messages at their offsets (store arrival hook)."""
        key = (topic, queue_id)
        waiters = self._held.get(key)
        if not waiters:
            return
        keep = []
        for w in waiters:
            if w.offset < max_offset:
                if not w.future.done():
                    w.future.set_result(True)
            elif not w.future.done():
                keep.append(w)
        if keep:
            self._held[key] = keep
        else:
            del self._held[key]

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def wake_all(self) -> None:
        """Answer every held pull now, and every later one at once (shutdown)."""
        self.closed = True
        for waiters in list(self._held.values()):
            for w in waiters:
                if not w.future.done():
                    w.future.set_result(False)
        self._held.clear()
