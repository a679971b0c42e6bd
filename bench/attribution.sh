#!/usr/bin/env bash
# What naming the process behind each connection costs (issue 33, part 4): new connections per
# second (64 concurrent clients, examples/proxy_bench.rs `rate`, median of 3 runs of 2 s) from
# inside a `sandbox-net` sandbox, through transparent capture and through the sandbox's CONNECT
# proxy, with the daemon's lookup on and off (`SANDGATE_NO_ATTRIBUTION=1`), interleaved:
# ROUNDS (default 3) rounds of on, off. Goal: no change beyond noise. KIND=latency measures
# instead new connection + first byte, p50/p99 of 3,000 from one client (`direct` is then the
# transparent path).
# The origin is on a test host in a network namespace of this script's (45.90.9.2, routed only
# to the script's own veth, as in bench/transparent.sh); the daemon is a private one.
# Usage: bench/attribution.sh      (root; release build)
#        BUILD=debug bench/attribution.sh   (the debug build, for a quick look; not a figure)
set -euo pipefail
cd "$(dirname "$0")/.."
NS_PREFIX=sgattr HOST=45.90.9.2
# shellcheck source=bench/lib/net-origin.sh
. bench/lib/net-origin.sh

# One measurement: a fresh daemon (started by the launch, with the switch in its environment).
measure() { # on|off
    "$BIN/sandgate" stop >/dev/null 2>&1 || true
    local switch=()
    [ "$1" = off ] && switch=(SANDGATE_NO_ATTRIBUTION=1)
    (cd "$T/work" && env "${switch[@]}" "$BIN/sandgate" net --quiet --allow "$HOST" -- \
        env PROXY_BENCH_DIRECT_NAME=transparent "$BIN/examples/proxy_bench" "$KIND" "$ORIGIN" \
        connect=127.0.0.1:3128) | sed "s/^/$1 /"
}

# A run leaves ~25,000 connections in TIME_WAIT on the host (the daemon's side), nearly the
# whole ephemeral port range: the next run would fail to connect. Wait until they are gone.
settle() {
    for _ in $(seq 1 90); do
        [ "$(ss -Htan state time-wait | wc -l)" -lt 2000 ] && return 0
        sleep 1
    done
}

echo "== $KIND inside sandbox-net ($BUILD build), lookup on and off, $ROUNDS rounds"
for _ in $(seq 1 "$ROUNDS"); do
    settle; measure on
    settle; measure off
done
