#!/usr/bin/env bash
# Launch overhead of the sandbox tiers: `sandbox-run true`, `sandbox-net true` and
# `sandbox-build true` against bare `true` and bwrap (with and without a network namespace) in
# ONE hyperfine run, with each tier's ratio to the bwrap that bounds it; `sandbox-net` both
# registered with a running daemon (the normal case) and without one (handed to `sandgate`, which
# serves its proxy itself). The `sandbox-*` links point at the small launcher (`sandgate-launch`)
# as `sandgate install` makes them; the `sandgate run|net` rows run the big binary. Release
# build; needs hyperfine and bwrap.
# Usage: bench/launch.sh [extra hyperfine args]; SANDGATE_BIN=path measures that binary (and the
# launcher next to it) instead of building them (a release build takes minutes on a shared
# machine).
# Results: bench/launch.md (hyperfine's table: means) and bench/launch-median.md (medians and the
# overhead over bare `true`, the figures docs/performance.md quotes). bench/launch-cpu.sh measures the same
# commands' CPU time, which a loaded machine disturbs far less than wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${SANDGATE_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release --bins >/dev/null
  bin="$PWD/target/release/sandgate"
fi
dir="$(mktemp -d /var/tmp/sandgate-bench.XXXXXX)"
# Copies, as `cargo install` installs them: a file the linker wrote in small pieces is cached in
# small pages and costs each launch ~20 more page faults (see bench/launch-interleaved.py).
mkdir "$dir/bin"
cp "$(realpath "$bin")" "$dir/bin/sandgate"
cp "$(dirname "$(realpath "$bin")")/sandgate-launch" "$dir/bin/sandgate-launch"
bin="$dir/bin/sandgate"
unset RUST_BACKTRACE # a developer's shell setting, not a user's
# A private daemon (net/build launches register with it), stopped at the end.
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$bin" daemon >"$dir/daemon.log" 2>&1 &
for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && break; sleep 0.05; done
# The links, as `sandgate install` makes them: to the small launcher next to the binary.
for t in run net build; do ln -s "$(dirname "$bin")/sandgate-launch" "$dir/sandbox-$t"; done
cd "$dir"
hyperfine -N --warmup 20 --runs "${RUNS:-200}" --export-markdown "$OLDPWD/bench/launch.md" \
  --export-json "$dir/launch.json" "$@" \
  -n 'true' 'true' \
  -n 'bwrap' 'bwrap --ro-bind / / --dev /dev --proc /proc true' \
  -n 'bwrap --unshare-net' 'bwrap --ro-bind / / --dev /dev --proc /proc --unshare-net true' \
  -n 'bwrap --unshare-all' 'bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all true' \
  -n 'sandbox-run true' "$dir/sandbox-run true" \
  -n 'sandbox-net true' "$dir/sandbox-net true" \
  -n 'sandbox-net true (no daemon)' "env SANDGATE_NO_DAEMON=1 $dir/sandbox-net true" \
  -n 'sandbox-build true' "$dir/sandbox-build true" \
  -n 'sandgate run true' "$bin run -- true" \
  -n 'sandgate net true' "$bin net -- true"
python3 - "$dir/launch.json" >"$OLDPWD/bench/launch-median.md" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
med = {r["command"]: r["median"] for r in results}
base = med["true"]
# The reference that bounds each tier: bwrap for run, bwrap --unshare-net for net and build
# (both make a mount namespace; only these make a network namespace).
ref = {"sandbox-run true": "bwrap", "sandbox-net true": "bwrap --unshare-net",
       "sandbox-net true (no daemon)": "bwrap --unshare-net",
       "sandbox-build true": "bwrap --unshare-net",
       "sandgate run true": "bwrap", "sandgate net true": "bwrap --unshare-net"}
print("| command | median [ms] | overhead over `true` [ms] | ratio to its bwrap | runs |")
print("|:---|---:|---:|---:|---:|")
for r in results:
    m = r["median"]
    ratio = f"{m / med[ref[r['command']]]:.2f}x `{ref[r['command']]}`" if r["command"] in ref else ""
    print(f"| `{r['command']}` | {m * 1e3:.2f} | {(m - base) * 1e3:+.2f} | {ratio} | {len(r['times'])} |")
PY
cat "$OLDPWD/bench/launch-median.md"
