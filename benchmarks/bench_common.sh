# Shared by run_all.sh and safe_modes.sh (sourced, with $out set to the output directory):
# the tools' paths, one named run into $out, and a round of the peers.
py=.venv/bin/python
bench=.venv/bin/pymq-bench
peers=../shared/bench/peers
run() { # name, command...: stdout to $out/NAME.json, stderr to $out/NAME.err, logged with its exit code
    local name=$1; shift
    echo "== $name: $*" | tee -a "$out/log.txt"
    "$@" > "$out/$name.json" 2> "$out/$name.err"
    echo "   exit $?" | tee -a "$out/log.txt"
}
peer_round() { # name, workloads, seconds to wait for a quiet machine: Redis Streams and the ceiling (skipped when missing)
    if [ -x /tmp/peers/venv/bin/python ] && command -v redis-server >/dev/null; then
        run "peers-$1" /tmp/peers/venv/bin/python $peers/run_peers.py --peer redis,ceiling --workload "$2" \
            --manage --wait-quiet "$3" --json --out "$out/peers-$1-runs.json"
    fi
}
