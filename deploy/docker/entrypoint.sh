#!/bin/sh
# Container entrypoint: `namesrv ARGS` and `broker ARGS` run the daemons with the image's
# defaults (metrics on, the broker's store on the volume); anything else runs as given.
# exec: the daemon becomes PID 1, so the SIGTERM of `docker stop` reaches it
# and it shuts down cleanly (offsets persisted, no abort file).
set -eu
case "${1:-namesrv}" in
namesrv)
    [ "$#" -gt 0 ] && shift
    exec pymq-namesrv --metrics-port "${PYMQ_METRICS_PORT:-9976}" --log-format json "$@"
    ;;
broker)
    shift
    exec pymq-broker --store-dir /var/lib/pymq/store --metrics-port "${PYMQ_METRICS_PORT:-10919}" \
        --log-format json "$@"
    ;;
*)
    exec "$@"
    ;;
esac
