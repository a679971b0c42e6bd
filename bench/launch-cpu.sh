#!/usr/bin/env bash
# CPU time of one launch (perf stat's task-clock: every process of the launch, summed, plus the
# daemon's and its network factory's CPU time during the row, per launch), for the
# commands of bench/launch.sh. On a machine shared with other work, wall time mostly measures
# waiting for a core; CPU time is what a launch costs. Several rounds, interleaved, so that a
# change of load hits every row alike.
# Usage: bench/launch-cpu.sh [OLD_BINARY]   (SANDGATE_BIN=path, N=runs per row, ROUNDS=rounds)
# With OLD_BINARY, its rows (`old ...`) are measured next to this tree's (before/after).
# Each build is served by a daemon of its own build (and counted with its rows).
# `sandbox-TIER` rows run the small launcher (`sandgate-launch`, what the links point at; an
# OLD_BINARY without one next to it runs as `OLD TIER --`), `sandgate TIER` rows the big binary.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${SANDGATE_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release --bins >/dev/null
  bin="$PWD/target/release/sandgate"
fi
old="${1:+$(realpath "$1")}"
dir="$(mktemp -d /var/tmp/sandgate-bench.XXXXXX)"
unset RUST_BACKTRACE # a developer's shell setting, not a user's
# Copies of both builds, as `cargo install` installs them (see bench/launch-interleaved.py), and
# the links, as `sandgate install` makes them.
install_build() { # BINARY NAME -> the copy's path
  mkdir -p "$dir/$2"
  cp "$(realpath "$1")" "$dir/$2/sandgate"
  if [ -x "$(dirname "$(realpath "$1")")/sandgate-launch" ]; then
    cp "$(dirname "$(realpath "$1")")/sandgate-launch" "$dir/$2/sandgate-launch"
    for t in run net build; do ln -s "$dir/$2/sandgate-launch" "$dir/$2/sandbox-$t"; done
  fi
  echo "$dir/$2/sandgate"
}
bin="$(install_build "$bin" new)"
[ -n "$old" ] && old="$(install_build "$old" old)"
# Each build is served by a daemon of its own build (a daemon serves its own protocol's
# launchers only), in XDG directories of its own.
use_build() { # NAME
  export XDG_RUNTIME_DIR="$dir/$1-run" XDG_DATA_HOME="$dir/$1-data" XDG_CONFIG_HOME="$dir/$1-config"
  daemon_pid="$(cat "$XDG_RUNTIME_DIR/sandgate/daemon.pid" 2>/dev/null || true)"
}
start_daemon() { # BINARY NAME
  use_build "$2"
  mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
  "$1" daemon >"$dir/$2-daemon.log" 2>&1 &
  for _ in $(seq 100); do "$1" status >/dev/null 2>&1 && break; sleep 0.05; done
}
trap 'use_build old; [ -n "$old" ] && "$old" stop >/dev/null 2>&1; use_build new; "$bin" stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
[ -n "$old" ] && start_daemon "$old" old
start_daemon "$bin" new
use_build new
cd "$dir"
# CPU time of the daemon and its children (the network factory, see the daemon's `netpool`): a
# prepared network's making moves from the launch to them, so it is counted per launch too.
# Read per thread, as "TID NANOSECONDS" lines (every thread: a runtime's blocking threads live
# 10 s after their work, so threads come and go between two readings).
daemon_threads() {
  local pid f tid ns _
  for pid in "$daemon_pid" $(pgrep -P "$daemon_pid" || true); do
    for f in /proc/"$pid"/task/*/schedstat; do
      tid="${f%/schedstat}"
      tid="${tid##*/}"
      { read -r ns _ <"$f"; } 2>/dev/null && echo "$tid $ns"
    done
  done
  return 0
}
# Nanoseconds spent between two readings ($1 before, $2 after), summed per thread: after -
# before for a thread in both, all of after for a thread new since. A thread that exited in
# between is not counted: its time since the first reading is lost (an undercount, never a
# negative share). A thread id reused in between could read less than before: counted as 0.
daemon_delta() {
  { sed 's/^/b /' <<<"$1"; sed 's/^/a /' <<<"$2"; } |
    awk '$1 == "b" {b[$2] = $3; next}
         $1 == "a" {d = ($2 in b) ? $3 - b[$2] : $3; if (d > 0) s += d}
         END {printf "%d\n", s}'
}
row() {
  local name="$1" before after n="${N:-50}"
  shift
  before="$(daemon_threads)"
  perf stat -r "$n" -x, -e task-clock,context-switches,page-faults "$@" 2>&1 >/dev/null |
    awk -F, -v n="$name" '$3=="task-clock"{t=$1} $3=="context-switches"{c=$1} $3=="page-faults"{p=$1}
      END{printf "%s,%.3f,%d,%d", n, t, c, p}'
  # Let the pool's refill after the last launch finish before reading the daemon's time.
  sleep 0.2
  after="$(daemon_threads)"
  echo ",$(python3 -c "print(f'{$(daemon_delta "$before" "$after") / $n / 1e6:.3f}')")"
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
      if [ -n "$old" ]; then
        use_build old
        if [ -e "$dir/old/sandbox-$t" ]; then
          row "old sandbox-$t true" "$dir/old/sandbox-$t" true
        else
          row "old sandbox-$t true" "$old" "$t" -- true
        fi
        use_build new
      fi
      row "sandbox-$t true" "$dir/new/sandbox-$t" true
      row "sandgate $t true" "$bin" "$t" -- true
    done
  done
} >"$dir/rows.csv"
python3 - "$dir/rows.csv" <<'PY'
import csv, statistics, sys
rows = {}
for name, cpu, cs, pf, daemon in csv.reader(open(sys.argv[1])):
    rows.setdefault(name, []).append((float(cpu) + float(daemon), int(cs), int(pf), float(daemon)))
# CPU per launch = the launch's own (perf stat) + the daemon's and its factory's during the row.
med = {k: statistics.median(c for c, _, _, _ in v) for k, v in rows.items()}
dmed = {k: statistics.median(d for _, _, _, d in v) for k, v in rows.items()}
ref = lambda k: "bwrap" if "run" in k else "bwrap --unshare-net"
print("| command | CPU per launch (median of rounds) | of which the daemon's | ratio to its bwrap | context switches | page faults |")
print("|:---|---:|---:|---:|---:|---:|")
for k, v in rows.items():
    ratio = f"{med[k] / med[ref(k)]:.2f}x `{ref(k)}`" if "sand" in k else ""
    print(f"| `{k}` | {med[k]:.2f} ms | {dmed[k]:.2f} ms | {ratio} | {v[-1][1]} | {v[-1][2]} |")
PY
