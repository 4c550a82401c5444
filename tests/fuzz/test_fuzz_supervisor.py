"""The live-daemon fuzzer's failure modes, without daemons (issue 35: a run that stopped fuzzing said clean).

Fake workers run under the real :class:`Supervisor`: one that raises, one that stalls, none
that write, a time cap, a companion (the good producer's place) that fails; each must end
the run promptly and leave it not clean, saying why. :meth:`Report.problems` is checked
field by field from a clean report. The real worker runs against an in-process server that
swallows what it is sent, and writes exactly its budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

import benchmarks.fuzz_inputs as fuzz_inputs
from benchmarks.fuzz_daemon import fuzz_worker
from benchmarks.fuzz_inputs import KINDS
from benchmarks.fuzz_report import Report
from benchmarks.fuzz_supervisor import Budget, Supervisor, Tally, Worker


def writing(pause: float = 0.001) -> Worker:
    """A worker writing one input per ``pause`` while the budget lasts."""

    async def work(tally: Tally, budget: Budget, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if budget.take(1) == 0:
                return
            tally.count("fake")
            await asyncio.sleep(pause)

    return work


def raising_after(n: int) -> Worker:
    async def work(tally: Tally, budget: Budget, stop: asyncio.Event) -> None:
        for _ in range(n):
            tally.count("fake")
            await asyncio.sleep(0.001)
        raise ValueError("the generator broke")

    return work


def stalling_after(n: int) -> Worker:
    async def work(tally: Tally, budget: Budget, stop: asyncio.Event) -> None:
        for _ in range(n):
            tally.count("fake")
            await asyncio.sleep(0.001)
        await asyncio.Event().wait()  # hangs, as on a connection that never answers

    return work


async def idle(tally: Tally, budget: Budget, stop: asyncio.Event) -> None:
    """A worker that writes nothing and returns."""


async def good_producer(report: Report, stop: asyncio.Event) -> None:
    """Stands in for the good producer: each send acknowledged and read back."""
    while not stop.is_set():
        report.good_sent += 1
        report.good_acked += 1
        report.read_back += 1
        await asyncio.sleep(0.01)


async def run(workers: list[Worker], grace: float = 1.0, **kw: Any) -> tuple[Report, float]:
    """(the report, seconds the run took) with the stand-in good producer alongside."""
    report = Report()
    sup = Supervisor(report, grace=grace, **kw)
    sup.companion("good producer", good_producer(report, sup.stop))
    started = time.monotonic()
    await sup.run(workers)
    return report, time.monotonic() - started


async def test_a_run_by_count_writes_exactly_the_count_and_is_clean() -> None:
    report, _ = await run([writing() for _ in range(4)], inputs=1000, stall_seconds=5)
    assert report.inputs == 1000 == sum(report.per_worker) == sum(report.per_second)
    assert all(n > 0 for n in report.per_worker)
    assert report.problems() == [] and report.clean


async def test_a_worker_that_raises_ends_the_run_with_its_traceback() -> None:
    report, took = await run([writing(), raising_after(50), writing()], duration=30, stall_seconds=5)
    assert took < 10  # ended by the failure, not by the 30 s duration
    assert not report.clean
    (tb,) = report.worker_errors
    assert tb.startswith("worker 1:") and "Traceback" in tb and "ValueError: the generator broke" in tb
    assert "1 worker(s) raised" in report.problems()


async def test_a_stalled_worker_ends_the_run_and_is_named() -> None:
    report, took = await run([writing(), stalling_after(20), writing()], duration=30, stall_seconds=0.5)
    assert took < 10
    assert report.stalled_workers == [1] and not report.clean
    assert report.per_worker[1] == 20 and report.idle_at_end[1] > 0.5
    assert any("wrote nothing" in p for p in report.problems())


async def test_a_worker_quiet_only_at_the_end_is_stalled() -> None:
    """A worker whose last connection took over the stall limit is stalled, though it ended by itself
    (the watch, one tick per 5 s here, never saw it quiet)."""

    def quiet_then_return(n: int, pause: float) -> Worker:
        async def work(tally: Tally, budget: Budget, stop: asyncio.Event) -> None:
            for _ in range(n):
                tally.count("fake")
            await asyncio.sleep(pause)

        return work

    report, took = await run([quiet_then_return(30, 0.0), quiet_then_return(20, 0.8)], stall_seconds=0.6, tick=5.0)
    assert took < 3 and report.per_worker == [30, 20]
    assert report.stalled_workers == [1] and report.idle_at_end[1] >= 0.8 and not report.clean


async def test_workers_writing_nothing_are_not_clean() -> None:
    report, took = await run([idle, idle], inputs=1000, stall_seconds=5)
    assert took < 5 and report.inputs == 0 and not report.clean
    assert "no inputs written" in report.problems()


async def test_one_worker_writing_nothing_is_not_clean() -> None:
    report, _ = await run([writing(), idle], duration=0.5, stall_seconds=5)
    assert report.per_worker[0] > 0 and report.per_worker[1] == 0
    assert "a worker wrote no input" in report.problems()


async def test_a_run_by_count_ends_at_its_time_cap() -> None:
    report, took = await run([writing(0.01)], inputs=10**9, max_seconds=0.5, stall_seconds=5)
    assert took < 5 and report.time_capped and not report.clean
    assert 0 < report.inputs < 10**9
    assert any("time cap" in p for p in report.problems())


async def test_a_companion_that_raises_ends_the_run() -> None:
    report = Report()
    sup = Supervisor(report, duration=30, stall_seconds=5, grace=1.0)

    async def broken() -> None:
        await asyncio.sleep(0.1)
        raise ConnectionError("no route")

    sup.companion("good producer", broken())
    started = time.monotonic()
    await sup.run([writing()])
    assert time.monotonic() - started < 10
    (tb,) = report.worker_errors
    assert tb.startswith("good producer:") and "ConnectionError: no route" in tb


async def test_a_companion_that_ends_early_ends_the_run() -> None:
    report = Report()
    sup = Supervisor(report, duration=30, stall_seconds=5, grace=1.0)

    async def quits() -> None:
        await asyncio.sleep(0.1)

    sup.companion("good producer", quits())
    await sup.run([writing()])
    assert report.worker_errors == ["good producer: ended before the run was stopped"]


async def test_a_dead_daemon_ends_the_run() -> None:
    gone: list[str] = []
    asyncio.get_running_loop().call_later(0.3, gone.append, "broker")
    report, took = await run([writing()], duration=30, stall_seconds=5, dead=lambda: gone)
    assert took < 10 and report.dead == ["broker"] and not report.clean


# --- Report.problems, one field at a time ------------------------------------------------------------


def clean_report() -> Report:
    r = Report(seconds=10, inputs=1000, per_worker=[600, 400], connections=50, good_sent=5, good_acked=5, read_back=5)
    assert r.clean, r.problems()
    return r


BREAKS: dict[str, Callable[[Report], None]] = {
    "handler_failures": lambda r: setattr(r, "handler_failures", 1),
    "zero_inputs": lambda r: (setattr(r, "inputs", 0), setattr(r, "per_worker", [0, 0])),
    "many_connect_failures": lambda r: setattr(r, "connect_failures", 10),
    "connect_failures_without_connections": lambda r: (setattr(r, "connections", 0), setattr(r, "connect_failures", 5)),
    "worker_error": lambda r: r.worker_errors.append("worker 0: Traceback ..."),
    "stalled": lambda r: r.stalled_workers.append(1),
    "time_capped": lambda r: setattr(r, "time_capped", True),
    "short_of_target": lambda r: setattr(r, "target_inputs", 2000),
    "daemon_dead": lambda r: setattr(r, "daemons_alive", False),
    "no_good_ack": lambda r: (setattr(r, "good_acked", 0), setattr(r, "read_back", 0)),
    "good_errors": lambda r: setattr(r, "good_errors", 1),
    "lost": lambda r: (setattr(r, "lost", 1), setattr(r, "read_back", 4)),
    "a_worker_idle": lambda r: setattr(r, "per_worker", [1000, 0]),
}


@pytest.mark.parametrize("name", BREAKS)
def test_each_problem_makes_the_report_not_clean(name: str) -> None:
    r = clean_report()
    BREAKS[name](r)
    assert not r.clean and r.problems()
    assert r.as_dict()["clean"] is False and r.as_dict()["problems"] == r.problems()


def test_a_rare_connect_failure_is_tolerated() -> None:
    r = clean_report()
    r.connections, r.connect_failures = 1000, 1
    assert r.clean


# --- the real worker, against a server that swallows everything ----------------------------------------


async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await reader.read(1 << 16):
        pass
    writer.close()


async def fuzz_a_sink(inputs: int) -> Report:
    """Two real workers against a server that reads everything and answers nothing."""
    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    try:
        addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        report = Report()
        # A worker's own bounds allow 12 s of silence on one connection (connect 5 s, drain 5 s,
        # answers 2 s): a stall is more than that (10 s once tripped on a loaded CI machine).
        sup = Supervisor(report, inputs=inputs, max_seconds=30, stall_seconds=15, grace=5)
        await sup.run([fuzz_worker([addr], seed, None) for seed in range(2)])
    finally:
        server.close()
        await server.wait_closed()
    return report


async def test_the_real_worker_writes_its_budget_of_every_kind() -> None:
    report = await fuzz_a_sink(20_000)
    waits = f"slowest waits {report.slowest_wait}, drain timeouts {report.drain_timeouts}, idle {report.idle_at_end}"
    assert report.worker_errors == [] and report.stalled_workers == [], waits
    assert report.inputs == 20_000 and all(n > 0 for n in report.per_worker)
    assert set(report.by_kind) == set(KINDS) and report.connect_failures == 0


async def test_a_generator_that_raises_fails_the_real_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35's defect, replayed: an input the generator cannot build ends the run as a failure."""
    real = fuzz_inputs.Inputs._make

    def sometimes_broken(self: fuzz_inputs.Inputs, kind: str) -> tuple[bytes, bool]:
        if kind == "bad_length" and self.rng.random() < 0.5:
            raise OverflowError("cannot pack")
        return real(self, kind)

    monkeypatch.setattr(fuzz_inputs.Inputs, "_make", sometimes_broken)
    report = await fuzz_a_sink(10**9)
    assert report.worker_errors and "OverflowError: cannot pack" in report.worker_errors[0]
    assert not report.clean
