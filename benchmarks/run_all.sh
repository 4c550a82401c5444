#!/usr/bin/env bash
# Every figure the issues ask for, one after another on a quiet machine, with the peers
# (Redis Streams and the bare-asyncio ceiling from ../shared/bench/peers) run right before
# and after pymq's own workloads so the ratios compare runs taken close together.
#
#   bash benchmarks/run_all.sh [OUT_DIR]        # default /tmp/pymq-bench-all
#
# Needs: .venv with '.[dev]'; for the peers, redis-server and /tmp/peers/venv as
# ../shared/bench/peers/README.md says (skipped when missing). Takes about 20 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/pymq-bench-all}
mkdir -p "$out"
py=.venv/bin/python
bench=.venv/bin/pymq-bench
peers=../shared/bench/peers
run() { # name, command...
    local name=$1; shift
    echo "== $name: $*" | tee -a "$out/log.txt"
    "$@" > "$out/$name.json" 2> "$out/$name.err"
    echo "   exit $?" | tee -a "$out/log.txt"
}
peer_round() {
    if [ -x /tmp/peers/venv/bin/python ] && command -v redis-server >/dev/null; then
        run "peers-$1" /tmp/peers/venv/bin/python $peers/run_peers.py --peer redis,ceiling --workload all \
            --manage --wait-quiet 60 --json --out "$out/peers-$1-runs.json"
    fi
}

peer_round before
run transport   $py benchmarks/transport_bench.py --json
run prod-batch  $bench producer --embedded --quiet --json --count 200000 --batch-size 64
run prod-single $bench producer --embedded --quiet --json --count 20000
run prod-conc8  $bench producer --embedded --quiet --json --duration 10 --concurrency 8
run prod-async  $bench producer --embedded --quiet --json --count 200000 --mode async
run consume     $bench consumer --embedded --quiet --json --count 200000
rate=$($py -c "import json;print(int(json.load(open('$out/prod-batch.json'))['msgs_per_sec']//2))" 2>/dev/null || echo 20000)
run e2e-half    $bench e2e --embedded --quiet --json --rate "$rate" --duration 10 --batch-size 64
run orderly     $bench consumer --embedded --quiet --json --count 50000 --orderly --queues 8
run sendback    $bench consumer --embedded --quiet --json --count 20000 --fail-first
peer_round after
run store       $py benchmarks/store_bench.py --repeat 3 --json
run decode      $py benchmarks/decode_bench.py --json
run timer       $py benchmarks/timer_bench.py --pending 1000000 --burst 10000 --json
run scale       $py benchmarks/scale_bench.py --queues 10000 --topics 10 --json
run cold-read   $py benchmarks/cold_read_check.py --mb 1024 --json
if command -v java >/dev/null; then run spark $py benchmarks/spark_bench.py --json; fi
echo "results in $out"
