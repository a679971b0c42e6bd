#!/usr/bin/env bash
# What the scan of the writable trees (issue 31: repositories and host tools' files at every
# depth) costs a `build` launch: `sandgate build -- true` in a generated checkout of N files
# (default 100,000 in ~6,700 directories, 15 files a directory, up to 10 levels: the shape of a
# large source tree, no build output), against the same launch in an empty repository.
#
# Per launch, from the launcher's own step marks (SANDGATE_DEBUG=launch): the scan (one
# getdents per directory, or one stat for a directory unchanged since the previous launch: the
# scan's memory), the warden's watches (one inotify watch per directory read, or none when the
# daemon made them ahead and handed them with its answer: `ahead`), and the whole
# launch's wall time; medians over RUNS launches after one warm-up (page cache warm; the
# warm-up leaves the memory the measured launches use). The tree is left to settle for three
# seconds first: a directory changed within two seconds of a scan is listed, not remembered.
#
# Then the four launches (`build` and `net`, checkout and empty repository) taken in turn, each
# one's wall time, for the budget of the launch figures (`build` <= `net` + 1 ms). Then, when
# built (`cargo build --release -p sandgate-sandbox --example tree_scan`), the scan
# alone in CPU time (steadier than wall time on a shared machine), against a plain walk, the
# watches, the scan with the memory, and the scan before issue 31 (every directory to 6 levels,
# build output included). EXAMPLE=path picks another build of it (a debug one).
#
# Usage: bench/tree-scan.sh [SANDGATE_BINARY]   (N=100000 RUNS=15 ROUNDS=150 INDEX=0 from the
# environment; ROUNDS: the rounds of the four launches taken in turn at the end;
# INDEX=1 stages every file, so the git wall reads a 100,000-entry index too, which
# bench/git-wall.sh measures on its own). Without a binary, uses target/release/sandgate, else
# target/debug/sandgate (say which one you measured). Needs root or unprivileged user
# namespaces. Everything lives in a temp dir under /var/tmp (own HOME and XDG dirs, so a daemon
# of its own), removed at exit. No network.
set -euo pipefail

N="${N:-100000}" RUNS="${RUNS:-15}" INDEX="${INDEX:-0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${1:-}"
if [[ -z "$BIN" ]]; then
  BIN="$ROOT/target/release/sandgate"
  [[ -x "$BIN" ]] || BIN="$ROOT/target/debug/sandgate"
fi
[[ -x "$BIN" ]] || { echo "tree-scan: $BIN not found" >&2; exit 2; }
BIN="$(realpath "$BIN")"
DIR="$(mktemp -d /var/tmp/sandgate-treescan.XXXXXX)"
export HOME="$DIR/home" XDG_CONFIG_HOME="$DIR/home/.config" XDG_DATA_HOME="$DIR/home/.local/share"
export XDG_RUNTIME_DIR="$DIR/run" GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
cleanup() {
  [[ -f "$DIR/run/sandgate/daemon.pid" ]] && kill "$(cat "$DIR/run/sandgate/daemon.pid")" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT
mkdir -p "$HOME/.config/sandgate" "$HOME/.local/share/sandgate" "$XDG_RUNTIME_DIR"

git init -q "$DIR/empty"
git init -q "$DIR/big"
python3 - "$DIR/big" "$N" <<'PY'
import os, random, sys
random.seed(1)
root, n = sys.argv[1], int(sys.argv[2])
dirs, made, i = [(root, 0)], 0, 0
while made < n:
    d, depth = dirs[i % len(dirs)]
    i += 1
    for _ in range(15):
        if made >= n:
            break
        open(os.path.join(d, f"f{made}.rs"), "w").close()
        made += 1
    if depth < 10:
        for _ in range(random.randint(0, 2) if depth > 2 else 3):
            nd = os.path.join(d, f"d{len(dirs)}")
            os.mkdir(nd)
            dirs.append((nd, depth + 1))
print(f"tree-scan: {made} files in {len(dirs)} directories")
PY
if [[ "$INDEX" == 1 ]]; then git -C "$DIR/big" add -A; fi
sleep 3 # settled: see the scan's memory (sandbox/src/tree/memory.rs)

# One launch's step marks as "name ms" lines, its wall time, and whether the daemon's index
# answered its scan (1) or it scanned itself (0). TIER=net for the reference.
launch() {
  local dir="$1" t0 t1
  t0=$(date +%s%N)
  (cd "$dir" && SANDGATE_DEBUG=launch "$BIN" "${TIER:-build}" -- true 2>"$DIR/marks" >/dev/null)
  t1=$(date +%s%N)
  awk -v wall=$(((t1 - t0) / 1000)) '
    /sandgate: launch/ { ms = $3 + 0; sub(/.*\] /, ""); at[$0] = ms }
    END {
      printf "scan %.3f\n", at["writable trees scanned"] - at["hidden and read-only paths listed"]
      printf "watch %.3f\n", at["writable trees watched"] - at["spec built"]
      printf "wall %.3f\n", wall / 1000
      printf "indexed %d\n", ("writable trees answered by the daemon\047s index" in at)
      printf "ahead %d\n", ("watches made ahead by the daemon taken" in at)
    }' "$DIR/marks"
}

stop_daemon() {
  local pid_file="$DIR/run/sandgate/daemon.pid"
  [[ -f "$pid_file" ]] || return 0
  kill "$(cat "$pid_file")" 2>/dev/null || true
  flock "$pid_file" true # held by the daemon until it exits
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

measure() {
  local dir="$1" name="$2"
  launch "$dir" >/dev/null # warm-up: the page cache, and the daemon this launch starts
  for ((r = 0; r < RUNS; r++)); do launch "$dir"; done >"$DIR/$name.txt"
  for what in scan watch wall; do
    printf '%s %s ' "$what" "$(grep "^$what " "$DIR/$name.txt" | cut -d' ' -f2 | median)"
  done
}

empty=$(measure "$DIR/empty" empty)
big=$(measure "$DIR/big" big)
echo "tree-scan: $BIN, $RUNS launches each, medians in ms"
echo "tree-scan: empty repository:  $empty"
echo "tree-scan: $N-file checkout: $big"

# The daemon's index (sandbox/src/tree/index.rs): a first launch (no daemon: the launch scans
# itself, with the scan's memory) against a repeat launch (answered from the index), and `net`
# in the same tree as the budget's reference (build <= net + 1 ms), in one run.
for ((r = 0; r < RUNS; r++)); do stop_daemon; launch "$DIR/big"; done >"$DIR/first.txt"
for ((r = 0; r < 20; r++)); do # until the index answers: the first ask starts building it
  launch "$DIR/big" | grep -q '^indexed 1' && break
done
for ((r = 0; r < 20; r++)); do # until the warden's watches come made ahead (after an answer)
  launch "$DIR/big" | grep -q '^ahead 1' && break
done
for ((r = 0; r < RUNS; r++)); do launch "$DIR/big"; TIER=net launch "$DIR/big"; done >"$DIR/pairs.txt"
awk 'NR % 10 <= 5 && NR % 10 > 0' "$DIR/pairs.txt" >"$DIR/repeat.txt"
awk 'NR % 10 > 5 || NR % 10 == 0' "$DIR/pairs.txt" >"$DIR/net.txt"
col() { grep "^$1 " "$DIR/$2.txt" | cut -d' ' -f2 | median; }
first=$(col wall first) repeat=$(col wall repeat) net=$(col wall net)
# (A first launch's wall time includes starting the daemon: compare its scan and watches.)
echo "tree-scan: first launch (no index): scan $(col scan first) watch $(col watch first) wall $first"
echo "tree-scan: repeat launch (index answered $(grep -c '^indexed 1' "$DIR/repeat.txt") of $RUNS," \
  "watches made ahead $(grep -c '^ahead 1' "$DIR/repeat.txt") of $RUNS):" \
  "scan $(col scan repeat) watch $(col watch repeat) wall $repeat"
echo "tree-scan: net in the same tree: wall $net"
awk -v f="$first" -v r="$repeat" -v n="$net" 'BEGIN {
  printf "tree-scan: build/net: first %.2fx (net + %.1f ms), repeat %.2fx (net + %.1f ms)\n",
    f / n, f - n, r / n, r - n }'
# Taken in turn (ROUNDS rounds, each launch's wall time from python, the order rotated every
# round): `build` and `net` in the checkout and in an empty repository, so that what the large
# tree adds (against the empty repository) and what `build` adds (against `net`) are read apart,
# with the machine's drift spread over all four.
python3 - "$BIN" "$DIR" "${ROUNDS:-150}" <<'PY'
import statistics, subprocess, sys, time
bin, d, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
cases = [("net, checkout", "big", "net"), ("build, checkout", "big", "build"),
         ("build, empty", "empty", "build"), ("net, empty", "empty", "net")]
walls = {c[0]: [] for c in cases}
def launch(where, tier):
    t0 = time.perf_counter()
    subprocess.run([bin, tier, "--", "true"], cwd=f"{d}/{where}", stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t0) * 1e3
for r in range(rounds):
    for name, where, tier in cases[r % 4:] + cases[:r % 4]:
        walls[name].append(launch(where, tier))
m = {k: statistics.median(v) for k, v in walls.items()}
print(f"tree-scan: in turn, {rounds} rounds, medians: " +
      ", ".join(f"{k} {v:.2f} ms" for k, v in m.items()))
print(f"tree-scan: build, checkout - net, checkout: {m['build, checkout'] - m['net, checkout']:+.2f} ms "
      f"({m['build, checkout'] / m['net, checkout']:.2f}x); build, checkout - build, empty: "
      f"{m['build, checkout'] - m['build, empty']:+.2f} ms; build, empty - net, empty: "
      f"{m['build, empty'] - m['net, empty']:+.2f} ms")
PY
EXAMPLE="${EXAMPLE:-$ROOT/target/release/examples/tree_scan}"
if [[ -x "$EXAMPLE" ]]; then "$EXAMPLE" "$DIR/big" "$RUNS"; fi
