#!/usr/bin/env bash
# Issue 34's figures: what each safe mode costs next to the plain path, measured in the same
# minutes, ROUNDS times, with the peers (Redis Streams, the bare-uvloop ceiling) before and after.
#
#   bash benchmarks/safe_modes.sh [OUT_DIR] [ROUNDS]     # default /tmp/pymq-safe-modes 2
#
# Every safe figure sits next to its plain counterpart of the same round (the ratio is the
# figure): SYNC_MASTER / ASYNC_MASTER vs no slave (replication_bench.py) beside the bare-server
# floor of that shape (repl_floor_bench.py at several client/master costs), pop + ack vs push
# (pop_bench.py, beside a push consumer taking 32 a request: pop's shape), ACL + TLS vs plain
# (single sends and batches of 64; ACL alone and TLS alone too; the bare TLS floor of a batch,
# tls_floor_bench.py), transactional vs plain sync sends (two alternating pairs, and txn_floor_bench.py
# in one cluster), SYNC_FLUSH vs the bare-server floor whose async
# rate matches pymq's ASYNC_FLUSH rate (sync_floor_bench.py at several --work-us), and the
# Spark source vs its zero-work source. Needs .venv with '.[dev]'; the peers as
# ../shared/bench/peers/README.md says (skipped when missing); java for the Spark row.
# About 10 minutes a round. Ends with benchmarks/safe_modes_summary.py's table (OUT_DIR/summary.md).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/pymq-safe-modes}
rounds=${2:-2}
mkdir -p "$out"
source benchmarks/bench_common.sh
for r in $(seq "$rounds"); do
    peer_round "before-$r" W1,W2,W4 30
    run "repl-$r"         $py benchmarks/replication_bench.py --producers 8 --seconds 2 --slices 4 --json
    # (the floor of that shape: bare uvloop client, master and slave; the summary takes the cost
    # pair whose no-slave rate is nearest pymq's)
    run "repl-floor-$r"   $py benchmarks/repl_floor_bench.py --seconds 3 --rounds 2 \
        --work-us 0 20 40 70 --server-work-us 0 20 40 70 --pairs --json
    # (and SYNC's at pymq's slave cost: the bare slave spinning 16 µs a message costs what pymq's does, ~27 µs)
    run "repl-floor-slave-$r" $py benchmarks/repl_floor_bench.py --seconds 3 --rounds 2 --modes none sync \
        --work-us 20 40 --server-work-us 20 40 --slave-work-us 16 --pairs --json
    run "pop-$r"          $py benchmarks/pop_bench.py --messages 20000 --json
    # (the floor of pop + ack each: one empty request a round trip, one in flight)
    run "pop-floor-$r"    $py benchmarks/pop_floor_bench.py 1
    run "single-$r"       $bench producer --embedded --quiet --json --count 20000
    run "single-acl-tls-$r" $bench producer --embedded --quiet --json --count 20000 --acl --tls
    run "single-acl-$r"   $bench producer --embedded --quiet --json --count 20000 --acl
    run "single-tls-$r"   $bench producer --embedded --quiet --json --count 20000 --tls
    run "batch-$r"        $bench producer --embedded --quiet --json --count 200000 --batch-size 64
    run "batch-acl-tls-$r" $bench producer --embedded --quiet --json --count 200000 --batch-size 64 --acl --tls
    run "batch-acl-$r"    $bench producer --embedded --quiet --json --count 200000 --batch-size 64 --acl
    run "batch-tls-$r"    $bench producer --embedded --quiet --json --count 200000 --batch-size 64 --tls
    # (the floor of that shape: bare uvloop client and server, one 70 KB frame a round trip)
    run "tls-floor-$r"    $py benchmarks/tls_floor_bench.py --seconds 3 --rounds 3 \
        --work-us 0 200 0 --server-work-us 0 0 200 --pairs --json
    # (and of single sends: one 1,200-byte frame a round trip, at per-send costs near pymq's)
    run "tls-floor-single-$r" $py benchmarks/tls_floor_bench.py --seconds 3 --rounds 2 --frame-bytes 1200 \
        --work-us 0 40 60 --server-work-us 0 50 60 --pairs --json
    # (two pairs, alternating: one pair swings by 0.2 on this machine; the summary takes their sums)
    run "sync-$r"         $bench producer --embedded --quiet --json --count 10000
    run "txn-$r"          $bench producer --embedded --quiet --json --count 10000 --mode transaction
    run "sync-b-$r"       $bench producer --embedded --quiet --json --count 10000
    run "txn-b-$r"        $bench producer --embedded --quiet --json --count 10000 --mode transaction
    # (and both in one cluster, interleaved three times: plain, the protocol's shape, transactions)
    run "txn-floor-$r"    $py benchmarks/txn_floor_bench.py --count 4000 --rounds 3 --json
    run "flush-async-$r"  $bench producer --embedded --quiet --json --duration 10 --concurrency 8 --flush ASYNC_FLUSH
    run "flush-sync-$r"   $bench producer --embedded --quiet --json --duration 10 --concurrency 8 --flush SYNC_FLUSH
    run "floor-$r"        $py benchmarks/sync_floor_bench.py --work-us 10 20 30 60 100 --sync-by syncer --dir "$out" --json
    if command -v java >/dev/null; then run "spark-$r" $py benchmarks/spark_bench.py --messages 500000 --json; fi
    peer_round "after-$r" W1,W2,W4 30
done
$py benchmarks/safe_modes_summary.py "$out" "$rounds" | tee "$out/summary.md"
echo "results in $out"
