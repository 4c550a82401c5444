"""SYNC_FLUSH timing probe, loaded through PYTHONPATH into the embedded broker (a child process):

    GC2_STATS=/tmp/sync.txt PYTHONPATH=benchmarks/probes/sync_flush \\
        pymq-bench producer --embedded --quiet --json --count 30000 --concurrency 8 --flush SYNC_FLUSH

Every 300 syncs it appends medians to GC2_STATS: flush request -> msync start, msync, msync end ->
answer on the loop, and a send's append -> answer. Measurement only (it wraps GroupCommit and
CommitLogFlusher methods); never on a production path.
"""
import os, time
if os.environ.get("GC2_STATS"):
    import threading
    import pymq.broker.group_commit as g
    import pymq.broker.store.flush as fl
    pc = time.perf_counter
    st = {"reg": {}, "kick": {}, "start": {}, "done": {}, "loop": {}, "n": 0, "rows": []}
    ow, ok, osy = g.GroupCommit.wait, g.GroupCommit._kick, g.GroupCommit._synced
    def wait(self, resp, end):
        st["reg"].setdefault(end, pc())
        return ow(self, resp, end)
    def kick(self):
        t = pc(); before = self._asked
        ok(self)
        if self._asked != before: st["kick"][self._asked] = t
    def synced(self, target, okk):
        t = pc()
        st["loop"][target] = t
        osy(self, target, okk)
        st["n"] += 1
        if st["n"] % 300 == 0:
            rows = []
            for tgt, tl in list(st["loop"].items()):
                tk = st["kick"].get(tgt); ts = st["start"].get(tgt); td = st["done"].get(tgt)
                if tk and ts and td: rows.append((ts - tk, td - ts, tl - td))
            regs = sorted(st["reg"].items())
            # registration -> answer: for each reg end, first loop target >= end
            tg = sorted(st["loop"].items()); lat = []; j = 0
            for end, tr in regs:
                while j < len(tg) and tg[j][0] < end: j += 1
                if j < len(tg): lat.append(tg[j][1] - tr)
            def med(xs): xs = sorted(xs); return xs[len(xs)//2]*1e6 if xs else 0
            with open(os.environ["GC2_STATS"], "a") as f:
                f.write(f"syncs {st['n']} kick->start {med([r[0] for r in rows]):.0f}us msync {med([r[1] for r in rows]):.0f}us done->loop {med([r[2] for r in rows]):.0f}us reg->answer {med(lat):.0f}us\n")
            for k in ("reg", "kick", "start", "done", "loop"): st[k].clear()
    g.GroupCommit.wait, g.GroupCommit._kick, g.GroupCommit._synced = wait, kick, synced
    orun = fl.CommitLogFlusher.run
    oflush = fl.CommitLogFlusher._sync_once
    def flush_once(self, force):
        with self._cond:
            pass
        reqs_targets = getattr(self, "_cur_targets", [])
        t = pc()
        for tg in reqs_targets: st["start"][tg] = t
        oflush(self, force)
        t2 = pc()
        for tg in reqs_targets: st["done"][tg] = t2
    ocond_req = fl.CommitLogFlusher.request
    def request(self, offset, callback):
        ocond_req(self, offset, callback)
    fl.CommitLogFlusher._sync_once = flush_once
    # capture targets being flushed: wrap run's swap by patching _requests list access is hard; use request offsets
    _pending = []
    def request2(self, offset, callback):
        with self._cond:
            self.__dict__.setdefault("_cur_targets_pending", []).append(offset)
        ocond_req(self, offset, callback)
    def flush_once2(self, force):
        with self._cond:
            self._cur_targets = self.__dict__.get("_cur_targets_pending", [])
            self._cur_targets_pending = []
        return flush_once(self, force)
    fl.CommitLogFlusher.request = request2
    fl.CommitLogFlusher._sync_once = flush_once2
