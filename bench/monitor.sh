#!/usr/bin/env bash
# NFLOG decode + aggregate throughput (criterion): prints packets/s.
# Usage: bash bench/monitor.sh   (release build of sandgate-monitor's bench only)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(cargo bench -p sandgate-monitor --bench monitor_nflog -- --noplot 2>&1 | tee /dev/stderr)
echo "$out" | grep -A3 "nflog/decode_aggregate_64" | grep -i "thrpt" || true
