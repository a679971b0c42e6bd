#!/usr/bin/env bash
# What OpenTelemetry export costs the proxy (issue 35, part 2): new connections per second (64
# concurrent clients, examples/proxy_bench.rs `rate`, median of 3 runs of 2 s) from inside a
# `sandbox-net` sandbox through its CONNECT proxy, with export off and with export on to a
# collector that is down (connection refused: every batch fails, is retried with backoff, and the
# queue overflows, counted), interleaved: ROUNDS (default 3) rounds of off, down. Goal: no change
# beyond noise. KIND=latency measures new connection + first byte instead, p50/p99 of 3,000.
# Afterwards `sandgate status --json` of the last `down` daemon shows the dropped count.
# The origin is on a test host in a network namespace of this script's (45.90.9.2, as in
# bench/attribution.sh); the daemon is a private one; the "collector" is a closed port on
# 127.0.0.1.
# Usage: bench/telemetry.sh      (root; release build)
#        BUILD=debug bench/telemetry.sh   (the debug build, for a quick look; not a figure)
set -euo pipefail
cd "$(dirname "$0")/.."
NS_PREFIX=sgotel HOST=45.90.9.2
# shellcheck source=bench/lib/net-origin.sh
. bench/lib/net-origin.sh
mkdir -p "$T/config/sandgate"
# A port nothing listens on: bound, read, closed.
DOWN=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# One measurement: a fresh daemon (started by the launch) with export off or to a dead collector.
measure() { # off|down
    "$BIN/sandgate" stop >/dev/null 2>&1 || true
    if [ "$1" = down ]; then
        printf '[telemetry]\notlp_endpoint = "http://127.0.0.1:%s"\ninterval = "1s"\n' "$DOWN" \
            >"$T/config/sandgate/config.toml"
    else
        : >"$T/config/sandgate/config.toml"
    fi
    (cd "$T/work" && "$BIN/sandgate" net --quiet --allow "$HOST" -- \
        "$BIN/examples/proxy_bench" "$KIND" "$ORIGIN" connect=127.0.0.1:3128) | sed "s/^/$1 /"
}

# A run leaves ~25,000 connections in TIME_WAIT on the host (the daemon's side): wait until they
# are gone before the next.
settle() {
    for _ in $(seq 1 90); do
        [ "$(ss -Htan state time-wait | wc -l)" -lt 2000 ] && return 0
        sleep 1
    done
}

echo "== $KIND inside sandbox-net ($BUILD build), export off and to a collector that is down, $ROUNDS rounds"
for _ in $(seq 1 "$ROUNDS"); do
    settle; measure off
    settle; measure down
done
echo "== the last 'down' daemon's export counters"
"$BIN/sandgate" status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["telemetry"])'
