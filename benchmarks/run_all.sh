#!/usr/bin/env bash
# Every figure the issues ask for, one after another on a quiet machine, with the peers
# (Redis Streams and the bare-asyncio ceiling from ../shared/bench/peers) run right before
# and after pymq's own workloads so the ratios compare runs taken close together.
#
#   bash benchmarks/run_all.sh [OUT_DIR]        # default /tmp/pymq-bench-all
#
# Needs: .venv with '.[dev]'; for the peers, redis-server and /tmp/peers/venv as
# ../shared/bench/peers/README.md says (skipped when missing). Takes about 34 minutes. Ends with
# one summary table (benchmarks/summarize.py), also written to OUT_DIR/summary.md.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/pymq-bench-all}
mkdir -p "$out"
source benchmarks/bench_common.sh
redis_always() { # Redis Streams with appendfsync always (not one of the peers tool's servers): W4 for 10 s
    if [ -x /tmp/peers/venv/bin/python ] && command -v redis-server >/dev/null; then
        local d=$out/redis-always port=16389
        rm -rf "$d"; mkdir -p "$d"
        redis-server --bind 127.0.0.1 --port $port --protected-mode yes --dir "$d" --save '' --appendonly yes \
            --appendfsync always --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log"
        for _ in $(seq 50); do [ -s "$d/redis.pid" ] && break; sleep 0.1; done
        # (PEERS_ROOT: the driver reads the server's pid from $PEERS_ROOT/redis.pid for its CPU figures)
        run redis-always env PEERS_ROOT="$d" REDIS_PORT=$port /tmp/peers/venv/bin/python $peers/run_peers.py \
            --peer redis --workload W4 --json
        [ -s "$d/redis.pid" ] && kill "$(cat "$d/redis.pid")"
    fi
}

peer_round before all 60
run transport   $py benchmarks/transport_bench.py --json
run prod-batch  $bench producer --embedded --quiet --json --count 200000 --batch-size 64
run prod-single $bench producer --embedded --quiet --json --count 20000
run prod-conc8  $bench producer --embedded --quiet --json --duration 10 --concurrency 8
run prod-async  $bench producer --embedded --quiet --json --count 200000 --mode async
run consume     $bench consumer --embedded --quiet --json --count 200000
rate=$($py -c "import json;print(int(json.load(open('$out/prod-batch.json'))['msgs_per_sec']//2))" 2>/dev/null || echo 20000)
run e2e-half    $bench e2e --embedded --quiet --json --rate "$rate" --duration 10 --batch-size 64
run orderly     $bench consumer --embedded --quiet --json --count 50000 --orderly --queues 8
# (200,000: 20,000 send-backs took 0.1-0.3 s, too short to compare)
run sendback    $bench consumer --embedded --quiet --json --count 200000 --fail-first
run prod-conc8-sync  $bench producer --embedded --quiet --json --count 20000 --concurrency 8 --flush SYNC_FLUSH
run prod-conc8-async $bench producer --embedded --quiet --json --count 20000 --concurrency 8 --flush ASYNC_FLUSH
# The same for 10 s: a store syncing ~2,000 times a second for longer than a second or two
# shows what a short run hides (mapping-written commitlog pages: 2.7x dearer syncs after ~2 s),
# next to Redis with appendfsync always (its acks wait for the disk too).
run prod-conc8-sync-10s  $bench producer --embedded --quiet --json --duration 10 --concurrency 8 --flush SYNC_FLUSH
run prod-conc8-async-10s $bench producer --embedded --quiet --json --duration 10 --concurrency 8 --flush ASYNC_FLUSH
# What this machine allows that shape at all: a bare server with an oracle group commit, syncing
# on its loop (no hand-off) and through pymq's C syncer thread, its client as costly per send.
run sync-floor  $py benchmarks/sync_floor_bench.py --work-us 10 --dir "$out" --json
# Transactional sends next to plain single sends (issue 34: aim >= 0.7), and the floor of their
# protocol's shape (a sync send + a oneway two-record batch) in the same cluster.
run prod-txn    $bench producer --embedded --quiet --json --count 5000 --mode transaction
run prod-single-5k $bench producer --embedded --quiet --json --count 5000
run txn-floor   $py benchmarks/txn_floor_bench.py --count 3000 --rounds 3 --json
redis_always
peer_round after all 60
run store       $py benchmarks/store_bench.py --repeat 3 --json
run decode      $py benchmarks/decode_bench.py --json
run timer       $py benchmarks/timer_bench.py --pending 1000000 --burst 10000 --json
# Scale (issue 19): 10,000 queues over 10 topics (first touches, steady puts, restart time with
# 10,000 queue files, clean and after a crash); a cold backlog after dropping its pages from
# the page cache (posix_fadvise DONTNEED on the store's own files: needs no privilege),
# read as fast as possible and by a consumer held to 300 MB/s.
run scale       $py benchmarks/scale_bench.py --queues 10000 --topics 10 --dir "$out/scale-store" --json
run cold-read   $py benchmarks/cold_read_check.py --mb 1024 --dir "$out/cold-store" --json
run cold-read-paced $py benchmarks/cold_read_check.py --mb 1024 --pace 300 --dir "$out/cold-store" --json
if command -v java >/dev/null; then run spark $py benchmarks/spark_bench.py --json; fi
# Issue 34: each safe mode next to its plain counterpart, one round (safe_modes.sh alone runs two);
# replication next to its floor (repl_floor_bench.py: bare client, master and slave of the same shape).
bash benchmarks/safe_modes.sh "$out/safe-modes" 1 > "$out/safe-modes.log" 2>&1
$py benchmarks/summarize.py "$out" | tee "$out/summary.md"
cat "$out/safe-modes/summary.md"
echo "results in $out"
