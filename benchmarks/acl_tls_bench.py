"""Interleaved A/B of ``pymq-bench producer`` configurations, with CPU per message per process.

    python benchmarks/acl_tls_bench.py ROUNDS 'label|tree|args' ...

Each configuration runs ``pymq-bench producer --embedded --quiet --json ARGS`` from ``tree``
(``PYTHONPATH=tree``); round 1 runs them in the order given, round 2 reversed, and so on (A,B,B,A).
Per run: msgs/s, and the client's and the busiest child's (the embedded broker's) CPU time per
message, from ``/proc`` over the run's sending phase (see :func:`run`). Then medians, with
the first configuration's rate as 1.00. Example (issue 34, ACL + TLS against the plain path)::

    python benchmarks/acl_tls_bench.py 2 "plain|/work/main|--duration 7" \\
        "acl+tls|.|--duration 7 --acl --tls" "acl+tls signed|.|--duration 7 --acl --tls --no-acl-sessions"
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PY = os.environ.get("PYTHON", sys.executable)
HZ = os.sysconf("SC_CLK_TCK")
OUT = Path("/tmp/acl_tls_bench.json")


def descendants(root: int) -> list[int]:
    out = [root]
    for q in os.listdir("/proc"):
        if q.isdigit():
            try:
                ppid = int(Path(f"/proc/{q}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == root:
                out += descendants(int(q))
    return out


def ticks(pid: int) -> int | None:
    try:
        x = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(x[11]) + int(x[12])


def run(tree: str, args: list[str], step: float = 0.2) -> tuple[float, float, float]:
    """msgs/s, client µs/msg, broker µs/msg of one run.

    CPU is sampled every ``step`` s; the window is the sending phase: from ``seconds`` (the
    run's own figure) before the summary appeared, trimmed by 0.4 s at the start and 0.2 s at
    the end (start-up, the TLS certificates and the read-back stay out of it).
    """
    cmd = [PY, "-c", "from pymq.cli.bench import main; main()", "producer", "--embedded", "--quiet", "--json", *args]
    OUT.write_text("")
    with OUT.open("w") as f:
        p = subprocess.Popen(
            cmd, cwd=tree, env={**os.environ, "PYTHONPATH": os.path.abspath(tree)}, stdout=f, stderr=subprocess.DEVNULL
        )
    samples: list[tuple[float, dict[int, int | None]]] = []
    pids = [p.pid]
    done_at = None
    while p.poll() is None and done_at is None:
        if len(pids) < 3:
            pids = descendants(p.pid)
        samples.append((time.time(), {q: ticks(q) for q in pids}))
        if OUT.stat().st_size:
            done_at = time.time()
        time.sleep(step)
    p.wait()
    result = json.loads(OUT.read_text())
    rate, seconds = result["msgs_per_sec"], result["seconds"]
    assert done_at is not None
    start, end = done_at - seconds + 0.4, done_at - 0.2
    window = [(t, d) for t, d in samples if start <= t <= end]
    (t0, a), (t1, b) = window[0], window[-1]
    cpu = {q: (b[q] - a[q]) / HZ / (t1 - t0) for q in b if a.get(q) is not None and b[q] is not None}  # type: ignore[operator]
    others = sorted((v for q, v in cpu.items() if q != p.pid), reverse=True)
    return rate, cpu.get(p.pid, 0.0) / rate * 1e6, (others[0] if others else 0.0) / rate * 1e6


def main() -> None:
    rounds = int(sys.argv[1])
    configs = [c.split("|") for c in sys.argv[2:]]
    results: dict[str, list[tuple[float, float, float]]] = {c[0]: [] for c in configs}
    for i in range(rounds):
        for label, tree, args in configs if i % 2 == 0 else configs[::-1]:
            r = run(tree, args.split())
            results[label].append(r)
            print(f"{label:24s} {r[0]:10.0f} msg/s  client {r[1]:7.1f} us/msg  broker {r[2]:7.1f} us/msg", flush=True)
    print("--- medians")
    base = None
    for label, rs in results.items():
        m = [statistics.median(x[i] for x in rs) for i in range(3)]
        base = base or m[0]
        ratio = m[0] / base
        print(f"{label:24s} {m[0]:10.0f} msg/s ({ratio:.2f})  client {m[1]:7.1f} us/msg  broker {m[2]:7.1f} us/msg")


if __name__ == "__main__":
    main()
