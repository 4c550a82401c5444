#!/bin/sh
# Validate the monitoring files of deploy/compose.yaml with promtool (Debian: apt-get install
# prometheus). Exits non-zero when a file is invalid or promtool is missing.
set -eu
cd "$(dirname "$0")"
if ! command -v promtool >/dev/null 2>&1; then
    echo "promtool not found (apt-get install prometheus, or a Prometheus release tarball)" >&2
    exit 127
fi
promtool check rules prometheus/pymq-rules.yml
# The config names the rules by their path inside the container; check it against a copy that
# points at the file here.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp prometheus/pymq-rules.yml "$tmp/pymq-rules.yml"
sed "s#/etc/prometheus/pymq-rules.yml#$tmp/pymq-rules.yml#" prometheus/prometheus.yml >"$tmp/prometheus.yml"
promtool check config "$tmp/prometheus.yml"
