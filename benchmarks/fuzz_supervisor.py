"""Runs the fuzz workers and watches them, so a run cannot stop fuzzing and still look clean.

Any worker (or companion task, such as the good producer) that raises ends the run, its
traceback in the report; a worker that writes nothing for ``stall_seconds`` ends it too; a
run by count ends when the count is written or at ``max_seconds`` (reported). Inputs are
counted as they are written, per worker and per second. No sockets here: the workers are
given to :meth:`Supervisor.run` (benchmarks/fuzz_daemon.py has the real ones).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

try:  # imported as benchmarks.fuzz_supervisor (tests) or from a script in benchmarks/
    from benchmarks.fuzz_report import Report
except ImportError:
    from fuzz_report import Report  # type: ignore[no-redef]


class Budget:
    """Inputs still to write, shared by the workers (None: unbounded).

    A worker takes a connection's worth before writing and gives back what it did not write,
    so the workers together write exactly the count and no more.
    """

    def __init__(self, total: int | None) -> None:
        self.left = total

    def take(self, want: int) -> int:
        if self.left is None:
            return want
        got = min(want, self.left)
        self.left -= got
        return got

    def give_back(self, unused: int) -> None:
        if self.left is not None:
            self.left += unused


class Tally:
    """One worker's counter: every input it writes goes through :meth:`count`."""

    def __init__(self, report: Report, worker: int, started: float) -> None:
        self.report = report
        self.worker = worker
        self.started = started
        self.last = started

    def count(self, kind: str) -> None:
        now = time.monotonic()
        self.last = now
        r = self.report
        r.inputs += 1
        r.by_kind[kind] += 1
        r.per_worker[self.worker] += 1
        second = int(now - self.started)
        if second >= len(r.per_second):
            r.per_second.extend([0] * (second + 1 - len(r.per_second)))
        r.per_second[second] += 1


#: a worker: writes inputs (each counted on its tally) while the budget lasts and stop is not set
Worker = Callable[[Tally, Budget, asyncio.Event], Awaitable[None]]


def _traceback(name: str, exc: BaseException) -> str:
    return f"{name}: " + "".join(traceback.format_exception(exc))


class Supervisor:
    """Owns the run's stop event; :meth:`companion` starts a task watched like a worker."""

    def __init__(
        self,
        report: Report,
        *,
        inputs: int | None = None,
        duration: float | None = None,
        max_seconds: float | None = None,
        stall_seconds: float = 10.0,
        grace: float = 15.0,
        dead: Callable[[], list[str]] = list,
        tick: float = 0.1,
    ) -> None:
        self.report = report
        self.budget = Budget(inputs)
        self.duration = duration
        self.max_seconds = max_seconds
        self.stall_seconds = stall_seconds
        #: how long workers and companions may take to finish once the run is stopped
        self.grace = grace
        #: names of the daemons no longer running (checked every tick)
        self.dead = dead
        self.tick = tick
        self.stop = asyncio.Event()
        self.companions: dict[asyncio.Task[None], str] = {}
        report.target_inputs = inputs
        report.stall_seconds = stall_seconds

    def _failed(self, name: str) -> Callable[[asyncio.Task[Any]], None]:
        def done(task: asyncio.Task[Any]) -> None:
            if not task.cancelled() and (exc := task.exception()) is not None:
                self.report.worker_errors.append(_traceback(name, exc))
                self.stop.set()

        return done

    def companion(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Runs ``coro`` for the whole run (it must end once :attr:`stop` is set); if it raises, the run fails."""
        task = asyncio.ensure_future(coro)
        task.add_done_callback(self._failed(name))
        self.companions[task] = name
        return task

    def _check(self, started: float, tallies: list[Tally], running: set[int]) -> None:
        """One tick of the watch: stop the run on a dead daemon, its duration, the time cap or a stall."""
        now = time.monotonic()
        if dead := self.dead():
            self.report.daemons_alive = False
            self.report.dead.extend(d for d in dead if d not in self.report.dead)
            self.stop.set()
        if self.duration is not None and now - started >= self.duration:
            self.stop.set()
        if self.max_seconds is not None and now - started >= self.max_seconds:
            self.report.time_capped = True
            self.stop.set()
        stalled = [t.worker for t in tallies if t.worker in running and now - t.last > self.stall_seconds]
        if stalled:
            self.report.stalled_workers.extend(w for w in stalled if w not in self.report.stalled_workers)
            self.stop.set()

    async def run(self, workers: Sequence[Worker]) -> Report:
        """Runs ``workers`` until the budget is spent, the duration is up or something fails."""
        report = self.report
        started = time.monotonic()
        report.per_worker = [0] * len(workers)
        tallies = [Tally(report, i, started) for i in range(len(workers))]
        tasks: dict[asyncio.Task[None], int] = {}
        ended: dict[int, float] = {}

        def record_end(task: asyncio.Task[None]) -> None:
            ended.setdefault(tasks[task], time.monotonic())

        for i, worker in enumerate(workers):
            task = asyncio.ensure_future(worker(tallies[i], self.budget, self.stop))
            tasks[task] = i
            task.add_done_callback(self._failed(f"worker {i}"))
            task.add_done_callback(record_end)
        try:
            while not self.stop.is_set() and len(ended) < len(workers):
                self._check(started, tallies, {i for i in range(len(workers)) if i not in ended})
                self._check_companions()
                running = [t for t in tasks if not t.done()]
                if running:  # woken by the tick, or by a worker ending
                    await asyncio.wait(running, timeout=self.tick, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.stop.set()
            # every worker gets the grace period to finish its connection; one that does not is stalled
            _done, pending = await asyncio.wait(list(tasks), timeout=self.grace) if tasks else (set(), set())
            stopped = time.monotonic()
            for task in pending:
                task.cancel()
                if tasks[task] not in report.stalled_workers:
                    report.stalled_workers.append(tasks[task])
            await asyncio.gather(*pending, return_exceptions=True)
            report.seconds = stopped - started
            await self._end_companions()
        for t in tallies:
            idle = ended.get(t.worker, stopped) - t.last
            report.idle_at_end.append(round(idle, 2))
            if idle > self.stall_seconds and t.worker not in report.stalled_workers:
                report.stalled_workers.append(t.worker)
        report.stalled_workers.sort()
        return report

    def _check_companions(self) -> None:
        """A companion runs until the stop: one that ended before it (without raising) is a failure too."""
        for task, name in self.companions.items():
            if task.done() and not task.cancelled() and task.exception() is None:
                self.report.worker_errors.append(f"{name}: ended before the run was stopped")
                self.stop.set()

    async def _end_companions(self) -> None:
        if not self.companions:
            return
        _done, pending = await asyncio.wait(list(self.companions), timeout=self.grace)
        for task in pending:
            task.cancel()
            self.report.worker_errors.append(f"{self.companions[task]}: still running {self.grace:g} s after the stop")
        await asyncio.gather(*pending, return_exceptions=True)
