#!/usr/bin/env bash
# Benchmarks TLS interception (issue 15) on 127.0.0.1 only: an HTTPS origin, the proxy with one
# sandbox that tunnels it (splice) and one that intercepts it (leaf of the local CA, a secret
# injected, an HTTP rule checked, upstream verified), and one client, all in one process
# (examples/intercept_bench.rs; origin, proxy and client each on their own runtime thread).
# Prints, in one run:
#   latency p50/p99 of a 16-byte GET on a new connection (CONNECT + TLS + GET) and kept alive,
#   tunnel vs intercepted, the difference, and the keep-alive ratio (aim: within 2x);
#   throughput of one download of 1 GiB through each.
# Usage: bench/intercept.sh [NEW_SAMPLES=300] [KEEPALIVE_SAMPLES=3000] [BYTES=1073741824]
# (release build; about a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sandgate-proxy --example intercept_bench
exec target/release/examples/intercept_bench "${1:-300}" "${2:-3000}" "${3:-1073741824}"
