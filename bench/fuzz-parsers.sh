#!/usr/bin/env bash
# Every parser of untrusted bytes, fuzzed on stable Rust (cargo-fuzz needs nightly) for SECONDS
# each (default 60): the TLS record layer / SNI parser (examples/sni_fuzz.rs, checked against
# rustls), the SOCKS5 parsers (tests/socks_fuzz.rs) and the DNS stub's request handling
# (tests/dns_fuzz.rs). Exits non-zero at the first failure; prints one line per parser.
# Usage: bench/fuzz-parsers.sh [SECONDS]   (debug build, like the tests; the test suite runs
# each for about a second)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
export CARGO_INCREMENTAL=0
cargo build -q -p sandgate-proxy --example sni_fuzz
cargo test -q -p sandgate-proxy --no-run --test suite 2>/dev/null
echo "== SNI / TLS record layer, ${SECS}s"
target/debug/examples/sni_fuzz "$SECS" | tail -n 3
echo "== SOCKS5 greeting, credentials, request, ${SECS}s"
SOCKS_FUZZ_SECS=$SECS cargo test -q -p sandgate-proxy --test suite socks_fuzz -- --nocapture 2>&1 \
    | grep -E "socks fuzz|test result"
echo "== DNS stub request handling, ${SECS}s"
DNS_FUZZ_SECS=$SECS cargo test -q -p sandgate-proxy --test suite dns_fuzz -- --nocapture 2>&1 \
    | grep -E "dns fuzz|test result"
