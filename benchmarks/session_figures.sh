#!/usr/bin/env bash
# Same-run figures for this session's note: peers, then pymq workloads, then peers again.
# Usage: benchmarks/session_figures.sh [OUT_DIR]; PEERS (../shared/bench/peers) and PEERS_PYTHON (a python
# with redis/nats installed) locate the peers. Every pymq run is one of the figures in the closing notes.
set -uo pipefail
out=${1:-/tmp/bench-session}; rm -rf "$out"; mkdir -p "$out"
peers=${PEERS:-$(cd "$(dirname "$0")/../.." && pwd)/shared/bench/peers}
cd "$(dirname "$0")/.."
b=.venv/bin/pymq-bench; py=.venv/bin/python
run() { local name=$1; shift; echo "== $name $(date +%T)" | tee -a "$out/log.txt"; timeout 240 "$@" > "$out/$name.json" 2> "$out/$name.err"; echo "   exit $?" | tee -a "$out/log.txt"; }
run peers-before ${PEERS_PYTHON:-python3} $peers/run_peers.py --peer redis,ceiling --workload all --manage --json --out "$out/peers-before-runs.json"
run w1   $b producer --embedded --quiet --json --count 200000 --batch-size 64
run w2   $b producer --embedded --quiet --json --count 20000
run w4   $b producer --embedded --quiet --json --duration 10 --concurrency 8
run cons $b consumer --embedded --quiet --json --count 200000
run w4-sync $b producer --embedded --quiet --json --count 20000 --concurrency 8 --flush SYNC_FLUSH
run w4-async $b producer --embedded --quiet --json --count 20000 --concurrency 8 --flush ASYNC_FLUSH
run w2-tx $b producer --embedded --quiet --json --count 5000 --mode transaction
run w2-plain $b producer --embedded --quiet --json --count 5000
run w2-acl-tls $b producer --embedded --quiet --json --count 20000 --acl --tls
run w1-acl-tls $b producer --embedded --quiet --json --count 200000 --batch-size 64 --acl --tls
run repl $py benchmarks/replication_bench.py --producers 8 --seconds 2 --slices 4 --json
run pop  $py benchmarks/pop_bench.py --messages 20000 --json
run peers-after ${PEERS_PYTHON:-python3} $peers/run_peers.py --peer redis,ceiling --workload all --manage --json --out "$out/peers-after-runs.json"
echo done >> "$out/log.txt"
