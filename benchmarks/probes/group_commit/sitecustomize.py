"""Probe of the SYNC_FLUSH group commit (broker side), loaded through PYTHONPATH into the broker:

    GC_STATS=/tmp/gc.txt PYTHONPATH=benchmarks/probes/group_commit \\
        .venv/bin/pymq-bench producer --embedded --quiet --json --count 20000 --concurrency 8 --flush SYNC_FLUSH
    cat /tmp/gc.txt

Appends, when the broker exits: the syncs asked for, the time from asking to the answer on the
loop (p50/p90: the sync plus both hand-offs), the sends answered per sync, and how long after a
sync's answers the 1st, 2nd, 4th and 8th sender's next send arrived (the senders' turnaround),
how long after the last send the next sync was asked for, and the time from one sync asked to
the next (the cycle).
Wraps GroupCommit's methods; does nothing without GC_STATS.
"""

import atexit
import collections
import os

_OUT = os.environ.get("GC_STATS")
if _OUT:
    from pymq.broker.sync_flush import group_commit as _gc

    _synced_at = {"t": 0.0, "n": 0}
    _sync_times: list[float] = []
    _answered: list[int] = []
    _arrivals: dict[int, list[float]] = collections.defaultdict(list)
    _orig_synced = _gc.GroupCommit._synced
    _orig_wait = _gc.GroupCommit.wait
    _orig_kick = _gc.GroupCommit._kick
    _last_wait = {"t": 0.0}
    _arrival_to_ask: list[float] = []
    _cycles: list[float] = []
    _asked_at = {"t": 0.0}

    def _synced(self, target, ok):  # type: ignore[no-untyped-def]
        _sync_times.append(_gc._now() - self._requested_at)
        before = len(self._waiters)
        _orig_synced(self, target, ok)
        _answered.append(before - len(self._waiters))
        _synced_at["t"], _synced_at["n"] = _gc._now(), 0

    def _kick(self):  # type: ignore[no-untyped-def]
        before = self.requests
        _orig_kick(self)
        if self.requests != before:
            now = _gc._now()
            if _last_wait["t"]:
                _arrival_to_ask.append(now - _last_wait["t"])
            if _asked_at["t"]:
                _cycles.append(now - _asked_at["t"])
            _asked_at["t"] = now

    def wait(self, resp, end):  # type: ignore[no-untyped-def]
        _last_wait["t"] = _gc._now()
        if _synced_at["t"]:
            _synced_at["n"] += 1
            _arrivals[_synced_at["n"]].append(_gc._now() - _synced_at["t"])
        return _orig_wait(self, resp, end)

    def _pct(values: list[float], q: float) -> float:
        v = sorted(values)
        return v[min(len(v) - 1, int(len(v) * q))] * 1e6

    def _dump() -> None:
        if not _sync_times:
            return
        with open(_OUT, "a") as f:
            f.write(
                f"syncs {len(_sync_times)}, ask->answer p50 {_pct(_sync_times, 0.5):.0f} us "
                f"p90 {_pct(_sync_times, 0.9):.0f} us, answered/sync {sum(_answered) / len(_answered):.2f}\n"
            )
            for k in (1, 2, 4, 8):
                if _arrivals[k]:
                    f.write(f"  sender {k} back after the answers: p50 {_pct(_arrivals[k], 0.5):.0f} us\n")
            if _cycles:
                f.write(
                    f"  last send -> sync asked: p50 {_pct(_arrival_to_ask, 0.5):.0f} us; "
                    f"sync asked -> next asked: p50 {_pct(_cycles, 0.5):.0f} us\n"
                )

    _gc.GroupCommit._synced = _synced  # type: ignore[method-assign]
    _gc.GroupCommit.wait = wait  # type: ignore[method-assign]
    _gc.GroupCommit._kick = _kick  # type: ignore[method-assign]
    atexit.register(_dump)
