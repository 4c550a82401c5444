"""Probe of SYNC_FLUSH's C syncer path (broker side), loaded through PYTHONPATH into the broker:

    LS_STATS=/tmp/ls.txt PYTHONPATH=benchmarks/probes/loop_sync \\
        .venv/bin/pymq-bench producer --embedded --quiet --json --duration 10 --concurrency 8 --flush SYNC_FLUSH
    cat /tmp/ls.txt

Appends, when the broker exits: the time LoopSync.request takes on the loop (plan + submit),
the time from submitting a sync to the loop seeing its eventfd (the msync and both hand-offs),
p50 and p90, and that time's p50 for every second of the run (how syncs change as the run goes
on: through the mapping they went from ~150 to ~450 us after two seconds, with pwrite they stay
flat). Wraps LoopSync's methods; does nothing without LS_STATS.
"""

import atexit
import os
import time

_OUT = os.environ.get("LS_STATS")
if _OUT:
    from pymq.broker.sync_flush import loop_sync as _ls

    _now = time.perf_counter
    _request_times: list[float] = []
    _round_trips: list[float] = []
    _seen_at: list[float] = []
    _submitted = {"t": 0.0}
    _orig_request = _ls.LoopSync.request
    _orig_finish = _ls.LoopSync._finish

    def request(self, offset, callback):  # type: ignore[no-untyped-def]
        t0 = _now()
        _orig_request(self, offset, callback)
        t1 = _now()
        _request_times.append(t1 - t0)
        _submitted["t"] = t1

    def _finish(self, done, *, blocking):  # type: ignore[no-untyped-def]
        t0 = _now()
        if _submitted["t"]:
            _round_trips.append(t0 - _submitted["t"])
            _seen_at.append(t0)
            _submitted["t"] = 0.0
        _orig_finish(self, done, blocking=blocking)

    def _pct(values: list[float], q: float) -> float:
        v = sorted(values)
        return v[min(len(v) - 1, int(len(v) * q))] * 1e6

    def _dump() -> None:
        if not _round_trips:
            return
        by_second: dict[int, list[float]] = {}
        for at, rt in zip(_seen_at, _round_trips, strict=True):
            by_second.setdefault(int(at - _seen_at[0]), []).append(rt)
        with open(_OUT, "a") as f:
            f.write(
                f"syncs {len(_round_trips)}, request p50 {_pct(_request_times, 0.5):.0f} us, "
                f"submit->eventfd seen p50 {_pct(_round_trips, 0.5):.0f} us p90 {_pct(_round_trips, 0.9):.0f} us\n"
                "  p50 by second: " + " ".join(f"{_pct(v, 0.5):.0f}" for _, v in sorted(by_second.items())) + "\n"
            )

    _ls.LoopSync.request = request  # type: ignore[method-assign]
    _ls.LoopSync._finish = _finish  # type: ignore[method-assign]
    atexit.register(_dump)
