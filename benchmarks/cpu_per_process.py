"""CPU per process and thread while a command runs: sampled from /proc over SPAN seconds after WARM seconds.

    python benchmarks/cpu_per_process.py pymq-bench producer --embedded --quiet --json --duration 6 --concurrency 8

CPU% per thread and per process of the command and its children; with pymq-bench --json the
rate is printed too, so CPU time per message = CPU% / rate.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path("/tmp/cpuwatch.out")


def procs(root: int) -> list[int]:
    """``root`` and its descendants."""
    out = [root]
    for q in os.listdir("/proc"):
        if q.isdigit():
            try:
                ppid = int(Path(f"/proc/{q}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except Exception:
                continue
            if ppid == root:
                out += procs(int(q))
    return out


def snap(root: int) -> dict[tuple[int, int, str], int]:
    """CPU ticks (user + system) of every thread of ``root``'s tree."""
    d = {}
    for pid in procs(root):
        try:
            for t in os.listdir(f"/proc/{pid}/task"):
                f = Path(f"/proc/{pid}/task/{t}/stat").read_text()
                name = f[f.index("(") + 1 : f.rindex(")")]
                x = f.rsplit(")", 1)[1].split()
                d[(pid, int(t), name)] = int(x[11]) + int(x[12])
        except Exception:
            pass  # (a thread or process that ended meanwhile)
    return d


def main() -> None:
    with OUT.open("w") as out:
        p = subprocess.Popen(sys.argv[1:], stdout=out, stderr=subprocess.DEVNULL)
    time.sleep(float(os.environ.get("WARM", "2.5")))
    a = snap(p.pid)
    t0 = time.time()
    time.sleep(float(os.environ.get("SPAN", "2")))
    b = snap(p.pid)
    dt = time.time() - t0
    hz = os.sysconf("SC_CLK_TCK")
    tot: dict[int, float] = {}
    for k in b:
        if k in a:
            v = (b[k] - a[k]) / hz / dt * 100
            if v > 0.4:
                print(f"{k[0]:>7} {k[1]:>7} {k[2]:<16} {v:5.1f}%")
            tot[k[0]] = tot.get(k[0], 0) + v
    print("per process:", {k: round(v, 1) for k, v in tot.items()})
    p.wait()
    try:
        print(json.loads(OUT.read_text())["msgs_per_sec"])
    except Exception as e:
        print("no json", e)


if __name__ == "__main__":
    main()
