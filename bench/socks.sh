#!/usr/bin/env bash
# SOCKS5 against HTTP CONNECT on the same sandgate proxy (the same listener serves both), on
# 127.0.0.1 only, measured in the same run by examples/proxy_bench.rs:
#   (a) one 1 GiB transfer through the tunnel, GB/s (median of 5)
#   (b) new connection + handshake + small GET, p50/p99 and what the proxy adds to direct
#   (c) new tunnels per second, 64 concurrent clients (median of 3 runs of 2 s)
# Usage: bench/socks.sh [--release]   (default: the debug build, for machines where a release
# build is not wanted; absolute numbers are then far below a release build's, the ratio between
# the two protocols is what this measures)
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=debug
FLAGS=()
if [ "${1:-}" = --release ]; then PROFILE=release; FLAGS=(--release); fi
cargo build "${FLAGS[@]}" -q -p sandgate --bin sandgate
cargo build "${FLAGS[@]}" -q -p sandgate-proxy --example proxy_bench
BIN=target/$PROFILE
T=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}

"$BIN/examples/proxy_bench" origin "$T/origin.port" & PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/origin.port" ] && break; sleep 0.1; done
ORIGIN=$(cat "$T/origin.port")

port=$(free_port)
mkdir -p "$T/xdg"
XDG_CONFIG_HOME="$T/xdg" RUST_LOG=warn "$BIN/sandgate" proxy --listen "127.0.0.1:$port" \
    --allow 127.0.0.1 2>"$T/sandgate.log" & PIDS+=($!)
wait_port "$port"

echo "== $PROFILE build; origin 127.0.0.1:$ORIGIN; one sandgate proxy on 127.0.0.1:$port"
"$BIN/examples/proxy_bench" client "127.0.0.1:$ORIGIN" \
    "http-connect=127.0.0.1:$port" "socks5=socks5://127.0.0.1:$port"
