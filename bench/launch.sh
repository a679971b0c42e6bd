#!/usr/bin/env bash
# Launch overhead of the sandbox tiers: `sandbox-run true` and `sandbox-net true` against bare
# `true` and `bwrap --ro-bind / / true`. Release build; needs hyperfine and bwrap.
# Usage: bench/launch.sh [extra hyperfine args]   (results: bench/launch.md)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin sandgate >/dev/null
bin="$PWD/target/release/sandgate"
dir="$(mktemp -d /var/tmp/sandgate-bench.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
ln -s "$bin" "$dir/sandbox-run"
ln -s "$bin" "$dir/sandbox-net"
ln -s "$bin" "$dir/sandbox-build"
cd "$dir"
hyperfine -N --warmup 20 --runs "${RUNS:-200}" --export-markdown "$OLDPWD/bench/launch.md" "$@" \
  -n 'true' 'true' \
  -n 'bwrap --ro-bind / / true' 'bwrap --ro-bind / / true' \
  -n 'bwrap --ro-bind / / --unshare-all true' 'bwrap --ro-bind / / --unshare-all true' \
  -n 'sandbox-run true' "$dir/sandbox-run true" \
  -n 'sandbox-net true' "$dir/sandbox-net true" \
  -n 'sandbox-build true' "$dir/sandbox-build true"
