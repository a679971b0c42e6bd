#!/usr/bin/env bash
# CPU time of one launch (perf stat's task-clock: every process of the launch, summed), for the
# commands of bench/launch.sh. On a machine shared with other work, wall time mostly measures
# waiting for a core; CPU time is what a launch costs. Several rounds, interleaved, so that a
# change of load hits every row alike.
# Usage: bench/launch-cpu.sh [OLD_BINARY]   (SANDGATE_BIN=path, N=runs per row, ROUNDS=rounds)
# With OLD_BINARY, its rows (`old ...`) are measured next to this tree's (before/after).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${SANDGATE_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release --bin sandgate >/dev/null
  bin="$PWD/target/release/sandgate"
fi
bin="$(realpath "$bin")"
old="${1:+$(realpath "$1")}"
dir="$(mktemp -d /var/tmp/sandgate-bench.XXXXXX)"
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$bin" daemon >"$dir/daemon.log" 2>&1 &
for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && break; sleep 0.05; done
cd "$dir"
row() {
  local name="$1"
  shift
  perf stat -r "${N:-50}" -x, -e task-clock,context-switches,page-faults "$@" 2>&1 >/dev/null |
    awk -F, -v n="$name" '$3=="task-clock"{t=$1} $3=="context-switches"{c=$1} $3=="page-faults"{p=$1}
      END{printf "%s,%.3f,%d,%d\n", n, t, c, p}'
}
{
  for _ in $(seq "${ROUNDS:-3}"); do
    row 'true' true
    row 'bwrap' bwrap --ro-bind / / --dev /dev --proc /proc true
    row 'bwrap --unshare-net' bwrap --ro-bind / / --dev /dev --proc /proc --unshare-net true
    # The namespaces a sandgate sandbox has (user, pid, net, ipc, uts; cgroup too): the same
    # kernel work, for reference (no ratio is taken against it).
    row 'bwrap --unshare-all' bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all true
    for t in run net build; do
      [ -n "$old" ] && row "old sandbox-$t true" "$old" "$t" -- true
      row "sandbox-$t true" "$bin" "$t" -- true
    done
  done
} >"$dir/rows.csv"
python3 - "$dir/rows.csv" <<'PY'
import csv, statistics, sys
rows = {}
for name, cpu, cs, pf in csv.reader(open(sys.argv[1])):
    rows.setdefault(name, []).append((float(cpu), int(cs), int(pf)))
med = {k: statistics.median(c for c, _, _ in v) for k, v in rows.items()}
ref = lambda k: "bwrap" if "run" in k else "bwrap --unshare-net"
print("| command | CPU per launch (median of rounds) | ratio to its bwrap | context switches | page faults |")
print("|:---|---:|---:|---:|---:|")
for k, v in rows.items():
    ratio = f"{med[k] / med[ref(k)]:.2f}x `{ref(k)}`" if "sandbox" in k else ""
    print(f"| `{k}` | {med[k]:.2f} ms | {ratio} | {v[-1][1]} | {v[-1][2]} |")
PY
