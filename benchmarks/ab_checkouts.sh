#!/usr/bin/env bash
# Two checkouts of pymq, each with its own .venv (pip install -e '.[dev]'), measured
# interleaved on the same machine: W1 (batches of 64), W2 (single awaited sends), W4 (8
# concurrent producers), consume, SYNC_FLUSH with 8 producers for 10 s, and put_path_bench's
# in-process costs. Each round runs every workload for A, then for B (then B, A on the next
# round), so both see the same machine; the summary gives each figure's median per checkout.
#
#   bash benchmarks/ab_checkouts.sh A_DIR B_DIR [ROUNDS] [OUT_DIR]
set -uo pipefail
a=$(cd "$1" && pwd); b=$(cd "$2" && pwd); rounds=${3:-3}; out=${4:-/tmp/pymq-ab}
mkdir -p "$out"
workloads=(
  "w1|pymq-bench producer --embedded --quiet --json --count 200000 --batch-size 64"
  "w2|pymq-bench producer --embedded --quiet --json --count 20000"
  "w4|pymq-bench producer --embedded --quiet --json --duration 10 --concurrency 8"
  "consume|pymq-bench consumer --embedded --quiet --json --count 200000"
  "sync10s|pymq-bench producer --embedded --quiet --json --duration 10 --concurrency 8 --flush SYNC_FLUSH"
  "putpath|python benchmarks/put_path_bench.py --json"
)
one() { # dir label round name command
    local dir=$1 label=$2 round=$3 name=$4 cmd=$5
    (cd "$dir" && PATH="$dir/.venv/bin:$PATH" $cmd) > "$out/$label-$name-$round.json" 2> "$out/$label-$name-$round.err"
    echo "$label $name round $round: exit $?"
}
for r in $(seq "$rounds"); do
    if (( r % 2 )); then order=("A $a" "B $b"); else order=("B $b" "A $a"); fi
    for w in "${workloads[@]}"; do
        name=${w%%|*}; cmd=${w#*|}
        for o in "${order[@]}"; do one "${o#* }" "${o%% *}" "$r" "$name" "$cmd"; done
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
figs = {}
for f in sorted(out.glob("*.json")):
    label, name, _ = f.stem.split("-", 2)
    try:
        data = json.loads(f.read_text())
    except ValueError:
        continue
    keys = ["msgs_per_sec"] if "msgs_per_sec" in data else [k for k, v in data.items() if isinstance(v, (int, float))]
    for k in keys:
        figs.setdefault((name, k), {}).setdefault(label, []).append(float(data[k]))
print(f"{'figure':34} {'A median':>12} {'B median':>12} {'B/A':>7}  (runs)")
for (name, k), by in sorted(figs.items()):
    ma = statistics.median(by.get("A", [0])); mb = statistics.median(by.get("B", [0]))
    print(f"{name + ' ' + k:34} {ma:12.2f} {mb:12.2f} {mb / ma if ma else 0:7.3f}  ({len(by.get('A', []))}/{len(by.get('B', []))})")
PY
