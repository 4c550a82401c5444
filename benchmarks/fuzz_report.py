"""What a live-daemon fuzz run (benchmarks/fuzz_daemon.py) reports, and when it counts as clean.

A run is clean only when it fuzzed, all the way through: every worker wrote inputs until the
end (none raised, none went quiet), the run ended by its own count or duration (not by the
time cap), the daemons stayed up and answered connections, no handler failed, and the good
producer's sends were all acknowledged and read back. :meth:`Report.problems` names each way
a run falls short; ``clean`` is that list being empty.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import median
from typing import Any

#: connect failures tolerated, as a fraction of connections made: a rare timeout on a loaded
#: machine; more means the daemon stopped accepting and the run was not fuzzing
CONNECT_FAILURE_RATIO = 0.01


@dataclass
class Report:
    seconds: float = 0.0
    #: the number of inputs asked for (``--inputs``), None for a run by duration
    target_inputs: int | None = None
    inputs: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    #: inputs written by each worker, and in each whole second of the run (all workers)
    per_worker: list[int] = field(default_factory=list)
    per_second: list[int] = field(default_factory=list)
    #: seconds from each worker's last input to its end (or the run's): a stall shows here
    idle_at_end: list[float] = field(default_factory=list)
    #: how long a worker may write nothing before the run is not clean, and who did
    stall_seconds: float = 0.0
    stalled_workers: list[int] = field(default_factory=list)
    #: tracebacks of the workers (and companions such as the good producer) that raised
    worker_errors: list[str] = field(default_factory=list)
    #: the run hit its time cap before its count (or duration) was reached
    time_capped: bool = False
    connections: int = 0
    #: frames the daemons sent back (answers, and pushes to fuzzed heartbeats)
    frames_received: int = 0
    connect_failures: int = 0
    #: the slowest wait of a worker at each step of a connection (connect, drain, answers), in
    #: seconds, and how often a drain timed out: where a stalled worker was waiting
    slowest_wait: dict[str, float] = field(default_factory=dict)
    drain_timeouts: int = 0
    good_sent: int = 0
    good_acked: int = 0
    good_errors: int = 0
    good_error_samples: list[str] = field(default_factory=list)
    #: the good producer's slowest acknowledged send (the daemons' lag under the flood)
    good_max_send_ms: int = 0
    #: acknowledged messages found again at their queue offsets after the run
    read_back: int = 0
    #: how long reading them back took, right after the run (a broker still busy shows here)
    read_back_seconds: float = 0.0
    lost: int = 0
    daemons_alive: bool = True
    dead: list[str] = field(default_factory=list)
    #: requests a handler failed on with an unexpected exception (SYSTEM_ERROR, logged with a
    #: traceback): each is a bug to fix, though the daemon stays up
    handler_failures: int = 0
    failure_samples: list[str] = field(default_factory=list)

    def waited(self, step: str, seconds: float) -> None:
        """Note a worker's wait at ``step`` (kept: the slowest one per step)."""
        if seconds > self.slowest_wait.get(step, 0.0):
            self.slowest_wait[step] = round(seconds, 2)

    @property
    def inputs_per_sec(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    def problems(self) -> list[str]:
        """Why the run is not clean (empty when it is)."""
        out: list[str] = []
        if self.worker_errors:
            out.append(f"{len(self.worker_errors)} worker(s) raised")
        if self.stalled_workers:
            out.append(f"worker(s) {self.stalled_workers} wrote nothing for over {self.stall_seconds:g} s")
        if self.inputs == 0:
            out.append("no inputs written")
        elif self.per_worker and min(self.per_worker) == 0:
            out.append("a worker wrote no input")
        if self.time_capped:
            out.append(f"time cap hit after {self.seconds:.0f} s")
        if self.target_inputs is not None and self.inputs != self.target_inputs:
            out.append(f"{self.inputs} inputs written of {self.target_inputs}")
        if self.connect_failures > CONNECT_FAILURE_RATIO * max(self.connections, 1):
            out.append(f"{self.connect_failures} connect failures for {self.connections} connections")
        if not self.daemons_alive:
            out.append(f"daemon(s) died: {self.dead}")
        if self.handler_failures:
            out.append(f"{self.handler_failures} handler failures")
        if self.good_acked == 0:
            out.append("the good producer had no send acknowledged")
        if self.good_errors:
            out.append(f"the good producer had {self.good_errors} errors")
        if self.lost or self.read_back != self.good_acked:
            out.append(f"{self.good_acked - self.read_back} acknowledged messages not read back")
        return out

    @property
    def clean(self) -> bool:
        return not self.problems()

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "by_kind"}
        d["by_kind"] = dict(self.by_kind)
        d["inputs_per_sec"] = round(self.inputs_per_sec, 1)
        d["problems"] = self.problems()
        d["clean"] = self.clean
        return d

    def text(self) -> str:
        """The report for a person: figures, then each problem and sample."""
        secs = self.per_second[:-1] or self.per_second  # the last second is a part one
        lines = [
            f"{self.inputs:,} inputs in {self.seconds:.1f} s = {self.inputs_per_sec:,.0f} inputs/s "
            f"over {self.connections:,} connections ({self.connect_failures} connect failures)",
            "  per second: " + (f"min {min(secs):,}, median {median(secs):,.0f}, max {max(secs):,}" if secs else "-"),
            "  per worker: "
            + ", ".join(f"{n:,}" for n in self.per_worker)
            + f"; idle at the end (s): {self.idle_at_end}",
            "  by kind: " + ", ".join(f"{k}={v:,}" for k, v in sorted(self.by_kind.items())),
            f"  good producer: sent {self.good_sent:,}, acked {self.good_acked:,}, read back {self.read_back:,}, "
            f"errors {self.good_errors}, lost {self.lost}; slowest send {self.good_max_send_ms} ms, "
            f"read back in {self.read_back_seconds} s",
            f"  slowest waits (s): {self.slowest_wait}; drain timeouts: {self.drain_timeouts}",
            f"  daemons alive: {self.daemons_alive} {self.dead or ''}",
            f"  handler failures (SYSTEM_ERROR with a traceback): {self.handler_failures}",
        ]
        lines += [f"  error: {s}" for s in self.good_error_samples]
        lines += [f"    {s}" for s in self.failure_samples]
        lines += [f"  worker error: {tb}" for tb in self.worker_errors]
        problems = self.problems()
        lines.append("  clean: " + ("yes" if not problems else "NO: " + "; ".join(problems)))
        return "\n".join(lines)
