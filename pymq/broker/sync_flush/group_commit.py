"""SYNC_FLUSH group commit on the broker's event loop (RocketMQ's GroupCommitService, loop side).

Sends that must wait for the disk (from any connection) register ``(end offset, response)``
here and get their answer as a :class:`~pymq.transport.dispatch.Deferred`, given (and so
written) from the sync's own callback: no future, callback pass or task per send. The
first waiter of an idle period asks for a sync at the end of its loop tick (so every send
decoded in that tick shares it): from the store's C syncer through
:mod:`pymq.broker.sync_flush.loop_sync` when the accelerator is built (the answer arrives on
the loop through an eventfd), else from the store's flusher thread (back by ``call_soon_threadsafe``).
Waiters arriving while that sync runs queue one more request, up to the highest end
waiting, which the syncer takes as soon as the running sync is done (no round trip
through the loop in between). At most two requests are out (one running, one queued):
later waiters join the queued one's successor. The batch therefore grows with the load by
itself (one sync per sync-duration, however many senders), and an idle broker answers
after one sync.

Waiters are kept in commitlog order (the appends that produced them run in order on this
loop) and are answered from the front: everything up to the flushed offset at once, one
loop callback per sync rather than per send. Timeouts need no timer per
request either: waiters also expire in arrival order, so one timer, armed for the oldest
waiter's deadline, answers FLUSH_DISK_TIMEOUT to everything past due.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from pymq.transport.dispatch import Deferred

#: ``request_flush(offset, callback)``: ``callback(ok)`` once everything below ``offset`` is on
#: disk (ok False: it cannot be). GroupCommit's takes it on the loop, never from inside the
#: request itself (LoopSync; a flusher thread's through :func:`on_the_loop`)
RequestFlush = Callable[[int, Callable[[bool], None]], None]
#: flush requests out at once: one being synced, one queued behind it
MAX_REQUESTS = 2
_now = time.perf_counter  # the loop's own clock has millisecond steps under uvloop


class GroupCommit:
    """Answers waiting SYNC_FLUSH sends once a disk sync covers them (one flush request in flight)."""

    def __init__(
        self,
        request_flush: RequestFlush,
        flushed_offset: Callable[[], int],
        timeout: float,
        linger: float = 0.0,
    ) -> None:
        self._request_flush = request_flush
        self._flushed_offset = flushed_offset
        self.timeout = timeout
        #: (end offset, deadline, answer, response), in arrival (= commitlog) order
        self._waiters: deque[tuple[int, float, Deferred, Command]] = deque()
        #: flush requests with the flusher (at most MAX_REQUESTS), and the highest offset asked for
        self._in_flight = 0
        self._asked = -1
        self._kick_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: syncs requested so far (tests and stats)
        self.requests = 0
        #: the longest a sync waits for more senders (seconds; 0: no lingering, see _linger_or_kick)
        self.linger = linger
        self._lingering = False
        self._linger_started = 0.0
        self._linger_until = 0.0
        #: how long the last lingers took to see their whole group back (smoothed; 0: none yet)
        self.spread = 0.0
        #: senders seen around the recent syncs (answered + left waiting), decaying by one per sync
        self.expected = 0
        #: how long a sync takes, request to answer on the loop (smoothed)
        self._requested_at = 0.0
        self.sync_time = 0.0
        #: when the last sync answered every waiter (0: never): its senders are expected back soon
        self._emptied_at = 0.0
        #: the loop polls while a sync runs, until then (see _poll_while_syncing)
        self._polling = False
        self._poll_until = 0.0

    def wait(self, resp: Command, end: int) -> Deferred:
        """An answer given as ``resp`` once the commitlog below ``end`` is synced (awaitable).

        After the timeout it is ``resp`` turned into FLUSH_DISK_TIMEOUT (the message stays stored).
        """
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut = Deferred()
        deadline = loop.time() + self.timeout
        self._waiters.append((end, deadline, fut, resp))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        if self._lingering:
            return fut  # the linger check kicks once enough senders are waiting
        if self._emptied_at and not self._in_flight:
            # The first sender back after a sync answered everyone: wait for the others too.
            emptied, self._emptied_at = self._emptied_at, 0.0
            if self._linger_for_group(emptied):
                return fut
        if end > self._asked and self._in_flight < self._max_requests and not self._kick_scheduled:
            # End of this tick: every send decoded in it shares the sync.
            self._kick_scheduled = True
            loop.call_soon(self._kick)
        return fut

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    # --- flush requests -------------------------------------------------------------------------------

    def _kick(self) -> None:
        self._kick_scheduled = False
        if self._in_flight >= MAX_REQUESTS or not self._waiters:
            return
        target = self._waiters[-1][0]
        for w in self._waiters:  # normally the last is the highest; stay correct if not
            if w[0] > target:
                target = w[0]
        if target <= self._asked:
            return  # a request out already covers every waiter
        self._asked = target
        self._in_flight += 1
        self._requested_at = _now()
        self.requests += 1
        try:
            self._request_flush(target, partial(self._synced, target))
        except BaseException:
            # Not asked after all: the next waiter asks again (a request stranded in
            # flight would stop every later sync until the timeouts).
            self._in_flight -= 1
            self._asked = -1
            raise
        if self.linger and not self._polling:
            self._poll_while_syncing()

    def _poll_while_syncing(self) -> None:
        """Keep the loop polling (``call_soon``) while the sync runs, for up to twice its usual time.

        A loop asleep in epoll when the sync's eventfd fires wakes ~25 us later on this VM, and
        every answer waits for it: polling cut a sync's request-to-answer time from ~160 to ~135 us
        and 8 SYNC producers went from 18.4-18.5k to 19.2-19.9k msgs/s (two pairs). It only runs
        while lingering is on (``sync_flush_linger_us``), bounded like the linger, and the loop
        keeps serving every connection meanwhile.
        """
        loop = self._loop
        assert loop is not None
        self._polling = True
        bound = min(self.linger, 2 * self.sync_time) if self.sync_time else self.linger
        self._poll_until = _now() + bound
        loop.call_soon(self._poll)

    def _poll(self) -> None:
        if self._in_flight and _now() < self._poll_until:
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._poll)
        else:
            self._polling = False

    @property
    def _max_requests(self) -> int:
        # Lingering: one sync at a time, the next one gathering whoever came during it.
        return 1 if self.linger else MAX_REQUESTS

    def _synced(self, target: int, ok: bool) -> None:
        self._in_flight -= 1
        took = _now() - self._requested_at
        self.sync_time = 0.8 * self.sync_time + 0.2 * took if self.sync_time else took
        waiting_before = len(self._waiters)
        if not ok and self._asked <= target:
            self._asked = -1  # ask again for whatever still waits
        waiters = self._waiters
        if ok:
            covered = max(target, self._flushed_offset())
            while waiters and waiters[0][0] <= covered:
                _end, _deadline, fut, resp = waiters.popleft()
                if not fut.done():
                    fut.set_result(resp)
        else:
            # The store could not sync (stopping, or the sync failed): answer what this request covered.
            while waiters and waiters[0][0] <= target:
                self._fail(waiters.popleft())
        if waiters and not self._kick_scheduled:
            self._linger_or_kick(waiting_before - len(waiters))
        elif not waiters:
            self.expected = max(waiting_before, self.expected - 1)
            self._emptied_at = _now()

    # --- lingering ------------------------------------------------------------------------------------

    def _linger_or_kick(self, answered: int) -> None:
        """Ask for the next sync now, or first wait for the senders just answered to send again.

        Closed-loop senders (each waits for its answer before sending the next message) split
        into groups that alternate between two syncs: those that sent during a sync wait for
        the next one while the others are being answered. A disk that flushes one range at a
        time then does a sync per group. Waiting until as many senders as were recently seen
        wait again (``expected``), for at most about twice the time the recent groups took to
        come back (:meth:`_linger_window`, never more than ``linger``), makes one sync cover them
        all: fewer, fuller syncs (RocketMQ's GroupCommitService waits too). The wait spins
        the loop (``call_soon``), which keeps serving every connection; its timers are too
        coarse for sub-millisecond waits.
        """
        waiting = len(self._waiters)
        self.expected = max(answered + waiting, self.expected - 1)
        if self.linger and waiting < self.expected:
            self._start_linger(_now())
            return
        self._kick()

    def _linger_for_group(self, emptied_at: float) -> bool:
        """Linger for the senders a sync answered all at once (True), unless that was too long ago.

        A sync that answered every waiter leaves nobody waiting, so without this the first
        sender back would get a sync of its own (as soon as the loop's tick ends), and the
        others, arriving during it, the next one: two syncs per round where one would do. A
        sender coming back only after a sync's duration plus the linger means the load
        dropped (or the broker was idle): it is synced at once.
        """
        if not self.linger or self.expected <= len(self._waiters):
            return False
        now = _now()
        if now - emptied_at > self._linger_window() + self.linger:
            self.expected = len(self._waiters)  # idle since: start counting again
            return False
        self._start_linger(now)
        return True

    def _linger_window(self) -> float:
        """How long a linger waits for its group: twice the time the recent groups took to come back.

        Senders answered together come back one after another, as fast as their client sends
        (8 producers in one process: ~130 us from the first to the last on this VM), so a window
        of one sync's duration (~125 us) often closed just before the last one: syncs of 7 and a
        straggler left for the next round. Until a group was seen whole, one sync's duration.
        Never more than ``linger``.
        """
        window = max(self.sync_time, 2 * self.spread)
        return min(window, self.linger) if window else self.linger

    def _start_linger(self, now: float) -> None:
        loop = self._loop
        assert loop is not None
        self._lingering = True
        self._linger_started = now
        self._linger_until = now + self._linger_window()
        loop.call_soon(self._linger_check)

    def _linger_check(self) -> None:
        if len(self._waiters) < self.expected:
            if _now() < self._linger_until:
                loop = self._loop
                assert loop is not None
                loop.call_soon(self._linger_check)
                return
        else:  # the whole group is back: how long that took sizes the next windows
            took = _now() - self._linger_started
            self.spread = 0.8 * self.spread + 0.2 * took if self.spread else took
        self._lingering = False
        if self._waiters:
            self._kick()

    # --- timeouts -------------------------------------------------------------------------------------

    def _expire(self) -> None:
        self._timer = None
        loop = self._loop
        assert loop is not None
        now = loop.time()
        waiters = self._waiters
        while waiters and waiters[0][1] <= now:
            self._fail(waiters.popleft())
        if waiters:
            self._timer = loop.call_at(waiters[0][1], self._expire)

    def _fail(self, waiter: tuple[int, float, Deferred, Command]) -> None:
        fut, resp = waiter[2], waiter[3]
        if fut.done():
            return
        resp.code = ResponseCode.FLUSH_DISK_TIMEOUT
        resp.remark = f"stored, but the disk flush did not finish within {self.timeout:.1f}s"
        fut.set_result(resp)


def on_the_loop(request_flush: RequestFlush) -> RequestFlush:
    """A request_flush that calls back on another thread (the store's flusher), with its
    callbacks brought to the calling loop (``call_soon_threadsafe``), as GroupCommit takes them."""

    def request(offset: int, callback: Callable[[bool], None]) -> None:
        loop = asyncio.get_running_loop()

        def done(ok: bool) -> None:  # on the flusher thread
            try:
                loop.call_soon_threadsafe(callback, ok)
            except RuntimeError:
                pass  # the loop is closed: nobody is waiting any more

        request_flush(offset, done)

    return request
