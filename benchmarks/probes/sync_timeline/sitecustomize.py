"""Probe: one SYNC_FLUSH group-commit round on the broker's clock, phase by phase (loaded into the broker):

    ST_STATS=/tmp/st.txt PYTHONPATH=benchmarks/probes/sync_timeline \\
        .venv/bin/pymq-bench producer --embedded --quiet --json --duration 6 --concurrency 8 --flush SYNC_FLUSH
    cat /tmp/st.txt

Appends, when the broker exits, the p50 of each phase of a round (between two syncs asked):
the last send's bytes in -> its waiter registered (the put path), -> the sync asked, -> the
syncer's eventfd seen on the loop, -> the group commit's answers given (record + futures), ->
the first answer written, -> the next round's first send in (the client's turnaround), and
the spacing of the sends that follow; and how long ``LoopSync.request`` (plan and submit)
holds the loop. The client process (it loads the probe too) adds, marked "client": its first
answer in after an idle gap -> its first send out, and the spacing of its sends within a
burst. Wraps Connection, GroupCommit and LoopSync; does nothing without ST_STATS.
"""

import atexit
import os
import time

_OUT = os.environ.get("ST_STATS")
if _OUT:
    from pymq.broker.sync_flush import group_commit as _gc
    from pymq.broker.sync_flush import loop_sync as _ls
    from pymq.transport import connection as _conn

    _now = time.perf_counter
    _phases: dict[str, list[float]] = {}
    _s = {
        "recv": 0.0,
        "last_recv": 0.0,
        "last_wait": 0.0,
        "kick": 0.0,
        "done": 0.0,
        "synced": 0.0,
        "first_write": 0.0,
        "first_recv": 0.0,
        "prev_recv": 0.0,
        "n_recv": 0,
    }

    def _add(name: str, value: float) -> None:
        _phases.setdefault(name, []).append(value * 1e6)

    _orig_data_received = _conn.Connection.data_received

    #: the client's side (only in a process that serves nothing: the broker's own calls are not it)
    _c = {"last_send": 0.0, "first_answer": 0.0, "serving": False}
    _IDLE = 40e-6  # (a client gap longer than this, and under 10 ms: it slept, waiting for answers)

    def data_received(self, data):  # type: ignore[no-untyped-def]
        if self.server_side:
            _c["serving"] = True
        elif not _c["serving"]:
            t = _now()
            if not _c["first_answer"] and _c["last_send"] and _IDLE < t - _c["last_send"] < 0.01:
                _c["first_answer"] = t
        if self.server_side:
            t = _now()
            _s["recv"] = t
            if _s["first_write"] and not _s["first_recv"]:
                _s["first_recv"] = t
                _add("5 first answer written -> next first send in", t - _s["first_write"])
            elif _s["first_recv"] and _s["prev_recv"]:
                _add("6 spacing of the following sends", t - _s["prev_recv"])
            _s["prev_recv"] = t
        return _orig_data_received(self, data)

    _orig_start_request = _conn.Connection._start_request

    def _start_request(self, cmd, timeout):  # type: ignore[no-untyped-def]
        t = _now()
        if _c["serving"]:
            pass
        elif _c["first_answer"]:
            if t - _c["first_answer"] < 0.01:  # (not a call made long after, e.g. a heartbeat)
                _add("client: first answer in -> first send out", t - _c["first_answer"])
            _c["first_answer"] = 0.0
        elif _c["last_send"] and t - _c["last_send"] < _IDLE:
            _add("client: spacing of its sends in a burst", t - _c["last_send"])
        _c["last_send"] = t
        return _orig_start_request(self, cmd, timeout)

    _orig_request = _ls.LoopSync.request

    def request(self, offset, callback):  # type: ignore[no-untyped-def]
        t = _now()
        _orig_request(self, offset, callback)
        _add("LoopSync.request (plan, submit) on the loop", _now() - t)

    _orig_write_command = _conn.Connection.write_command

    def write_command(self, cmd):  # type: ignore[no-untyped-def]
        if self.server_side and _s["synced"] and not _s["first_write"]:
            _s["first_write"] = _now()
            _add("4 answers given -> first answer written", _s["first_write"] - _s["synced"])
        return _orig_write_command(self, cmd)

    _orig_wait = _gc.GroupCommit.wait

    def wait(self, resp, end):  # type: ignore[no-untyped-def]
        t = _now()
        _s["last_wait"], _s["last_recv"] = t, _s["recv"]
        return _orig_wait(self, resp, end)

    _orig_kick = _gc.GroupCommit._kick

    def _kick(self):  # type: ignore[no-untyped-def]
        before = self.requests
        t = _now()
        _orig_kick(self)
        if self.requests != before:
            _add("0 last send in -> its waiter", _s["last_wait"] - _s["last_recv"])
            _add("1 its waiter -> sync asked", t - _s["last_wait"])
            _s["kick"] = t
            _s["first_write"] = _s["first_recv"] = _s["prev_recv"] = 0.0
            _s["synced"] = 0.0

    _orig_on_done = _ls.LoopSync._on_done

    def _on_done(self):  # type: ignore[no-untyped-def]
        t = _now()
        if _s["kick"]:
            _add("2 sync asked -> eventfd seen", t - _s["kick"])
        _s["done"] = t
        return _orig_on_done(self)

    _orig_synced = _gc.GroupCommit._synced

    def _synced(self, target, ok):  # type: ignore[no-untyped-def]
        _orig_synced(self, target, ok)
        t = _s["synced"] = _now()
        if _s["done"]:
            _add("3 eventfd seen -> answers given", t - _s["done"])

    _conn.Connection.data_received = data_received
    _conn.Connection.write_command = write_command
    _conn.Connection._start_request = _start_request
    _ls.LoopSync.request = request
    _gc.GroupCommit.wait = wait
    _gc.GroupCommit._kick = _kick
    _ls.LoopSync._on_done = _on_done
    _gc.GroupCommit._synced = _synced

    @atexit.register
    def _report() -> None:
        if not _phases:
            return
        with open(_OUT, "a") as f:
            f.write(f"pid {os.getpid()}\n")
            for name in sorted(_phases):
                v = sorted(_phases[name])
                f.write(f"{name}: p50 {v[len(v) // 2]:.0f} us p90 {v[int(len(v) * 0.9)]:.0f} us (n {len(v)})\n")
