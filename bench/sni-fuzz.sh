#!/usr/bin/env bash
# Randomised test of the proxy's TLS record-layer parser on stable Rust (cargo-fuzz needs nightly):
# real rustls ClientHellos mutated, random records and random bytes, checked for panics, for the
# same answer whether the bytes come at once or in pieces, and against rustls's own parser.
# Usage: bench/sni-fuzz.sh [SECONDS] [SEED]   (default 60 s; debug build, like the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p sandgate-proxy --example sni_fuzz
exec target/debug/examples/sni_fuzz "${1:-60}" ${2:+"$2"}
