"""SYNC_FLUSH timing probe, loaded through PYTHONPATH into the embedded broker (a child process):

    GC2_STATS=/tmp/sync.txt PYTHONPATH=benchmarks/probes/sync_flush \\
        pymq-bench producer --embedded --quiet --json --count 30000 --concurrency 8 --flush SYNC_FLUSH

Every 500 syncs it appends one line of medians to GC2_STATS (the embedded broker is a
multiprocessing child, which ends without running atexit): flush request -> the flusher thread
starts on it, flush pass -> msync start (the file lock), the msync itself, msync end -> the group
commit's answer on the loop, a send's wait from its append to its answer, sends per sync, and the
share of syncs that overlapped another one. GC2_SWITCH sets the GIL switch interval. Measurement
only (it wraps GroupCommit and the flusher's methods); never on a production path.
"""

import os
import threading
import time

if os.environ.get("GC2_STATS"):
    import pymq.broker.store.flush as fl
    import pymq.broker.store.mapped_file as mf
    import pymq.broker.sync_flush.group_commit as gc

    pc = time.perf_counter
    lock = threading.Lock()
    kicks: list[float] = []  # flush request -> the flusher starts on it (wake-up of the thread)
    syncs: list[tuple[float, float, float, int]] = []  # (flush pass entered, msync start, end, end offset)
    answers: list[tuple[float, int]] = []  # (time on loop, target)
    waits: list[float] = []
    running = [0]
    overlapped = [0]

    o_flush_once = fl.CommitLogFlusher._flush_once
    entered = [0.0]

    def flush_once(self, force):  # type: ignore[no-untyped-def]
        t = pc()
        entered[0] = t
        req = getattr(self, "_probe_requested", None)
        if force and req:
            kicks.extend(t - x for x in req)
            req.clear()
        return o_flush_once(self, force)

    o_sync = mf.MappedFileQueue.flush

    def sync_range(self):  # type: ignore[no-untyped-def]
        if self.directory.name != "commitlog":
            return o_sync(self)
        t0 = pc()
        end = self.max_offset
        with lock:
            running[0] += 1
            if running[0] > 1:
                overlapped[0] += 1
        try:
            return o_sync(self)
        finally:
            t1 = pc()
            with lock:
                running[0] -= 1
                syncs.append((entered[0] or t0, t0, t1, end))
                full = len(syncs) >= 500
            if full:
                report()

    o_wait = gc.GroupCommit.wait

    def wait(self, resp, end):  # type: ignore[no-untyped-def]
        fut = o_wait(self, resp, end)
        t = pc()
        fut.add_done_callback(lambda _f: waits.append(pc() - t))
        return fut

    o_request = fl.CommitLogFlusher.request

    def request(self, offset, callback):  # type: ignore[no-untyped-def]
        t = pc()
        o_request(self, offset, callback)
        self._probe_requested = getattr(self, "_probe_requested", [])
        self._probe_requested.append(t)

    fl.CommitLogFlusher.request = request
    o_synced = gc.GroupCommit._synced

    def synced(self, target, ok):  # type: ignore[no-untyped-def]
        answers.append((pc(), target))
        o_synced(self, target, ok)

    fl.CommitLogFlusher._flush_once = flush_once
    mf.MappedFileQueue.flush = sync_range
    gc.GroupCommit.wait = wait
    gc.GroupCommit._synced = synced

    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[len(xs) // 2] * 1e6 if xs else 0.0

    def report() -> None:
        done_at = {end: t1 for _c, _s, t1, end in syncs}
        hop = [t - done_at[tg] for t, tg in answers if tg in done_at and t >= done_at[tg]]
        n = len(syncs)
        with open(os.environ["GC2_STATS"], "a") as f:
            f.write(
                f"syncs {n} request->worker {med(kicks):.0f}us "
                f"pass->msync {med([s - c for c, s, _e, _ in syncs]):.0f}us "
                f"msync {med([e - s for _c, s, e, _ in syncs]):.0f}us done->loop {med(hop):.0f}us "
                f"append->answer {med(waits):.0f}us sends/sync {len(waits) / max(n, 1):.1f} "
                f"overlapped {overlapped[0] / max(n, 1):.0%}\n"
            )
        syncs.clear(), answers.clear(), waits.clear(), kicks.clear()
        overlapped[0] = 0


if os.environ.get("GC2_SWITCH"):
    import sys

    sys.setswitchinterval(float(os.environ["GC2_SWITCH"]))
