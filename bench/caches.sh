#!/usr/bin/env bash
# Package caches in the `build` tier against the same commands run directly (issue 32):
#   cargo  `cargo fetch && cargo build` of a small crate (anyhow, serde_json),
#   npm    `npm install` of three packages (express, lodash, commander),
#   pip    `venv/bin/pip install -r requirements.txt` (requests, attrs, docopt) into a venv made
#          just before (untimed; docopt is published only as source, so pip builds a wheel and
#          keeps it in its cache: the part of pip's cache a registry mirror that sends no cache
#          headers still lets pip use).
# Each tool is run in three states of its caches, every run in a fresh copy of the project (no
# target/, node_modules/, venv packages or lock file left from the run before):
#   cold      an empty HOME (so empty caches) and, sandboxed, no layer (`sandgate cache clear`);
#   warm      the second run: the same HOME and, sandboxed, the same layer;
#   host warm, layer empty (sandboxed only): the caches a direct run filled, a new project's
#             empty layer: the first sandboxed build of a project on a machine that has built
#             before. Compared with the direct warm run of the same round.
# Before the measured runs one unmeasured direct cold run warms the registry (or its mirror) and
# the page cache. Direct and sandboxed runs are taken in turn (the order rotating each round), so
# a load that drifts meets both; each ratio is sandboxed / direct of one round.
#
# Registries are reached for real: directly by the direct runs, through sandgate's proxy by the
# sandboxed ones, with no allow list. Questions are answered as a person would answer them: a
# watcher polls `sandgate pending --json` every POLL seconds and runs `sandgate allow HOST` (this
# sandbox's session) for each host asked about; every sandboxed run asks again, and the time its
# questions waited is part of its wall time (reported apart).
# One exception to "no configuration": when a registry's name resolves to a special-purpose
# address (private, documentation, ...: a mirror or a test network), the proxy's address guard
# refuses it unless the address itself is allowed, so the throw-away configuration then allows
# exactly those addresses (`[network] allow = ["ADDR"]`) and the script says so. The names are
# still asked about.
#
# Usage: bench/caches.sh [SANDGATE_BINARY]   (without one: `cargo build --release --bins`)
#   TOOLS="cargo npm pip"  which scenarios; a tool that is not installed is SKIPPED
#   COLD=3 WARM=5          rounds of cold pairs, and of warm triples (direct, warm, host warm)
#   POLL=0.25              the watcher's polling interval, seconds
#   ANSWER=""              more arguments to `sandgate allow` (e.g. "--for 1h": one question per
#                          project instead of one per sandbox)
#   OUT=bench/caches.md    where the table goes (also printed); raw rows go next to it (.tsv)
#   KEEP=1                 keep the scratch directory (logs of every run) instead of removing it
# Needs: the tools, python3 (summary), a kernel that lets sandgate's `build` tier run (root, or
# unprivileged user namespaces). Everything lives in a directory under /var/tmp (caches under
# /tmp are private inside a sandbox, never layered), with its own HOME per scenario and its own
# XDG_CONFIG_HOME, XDG_DATA_HOME and XDG_RUNTIME_DIR (so a daemon of its own); removed at exit.
set -euo pipefail

TOOLS="${TOOLS:-cargo npm pip}" COLD="${COLD:-3}" WARM="${WARM:-5}" POLL="${POLL:-0.25}"
read -r -a answer <<<"${ANSWER:-}"
for v in COLD WARM; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "caches: $v must be a positive integer" >&2; exit 2; }
done
repo="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$repo/bench/caches.md}"
if (($# > 0)); then
  bin="$(realpath "$1")"
else
  (cd "$repo" && cargo build --release --bins >&2)
  bin="$repo/target/release/sandgate"
fi
[[ -x "$bin" ]] || { echo "caches: $bin is not an executable" >&2; exit 2; }

# What the tools need from the real home, found before HOME changes: rustup's toolchains, and
# the real interpreter behind a pyenv shim (the shim would look for ~/.pyenv in the new HOME).
if [[ -z "${RUSTUP_HOME:-}" && -d "$HOME/.rustup" ]]; then export RUSTUP_HOME="$HOME/.rustup"; fi
py="$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)"

dir="$(mktemp -d /var/tmp/sandgate-caches.XXXXXX)"
mkdir -m 0700 "$dir/config" "$dir/data" "$dir/run" "$dir/home"
mkdir "$dir/bin" "$dir/homes" "$dir/work" "$dir/logs" "$dir/tmpl"
export XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/data" XDG_RUNTIME_DIR="$dir/run"
export HOME="$dir/home"
# Caches where each tool looks by default (under each scenario's HOME), no local wheel
# directory, no compiler cache; no update or version checks, no audit (each a request that is
# not the install).
unset CARGO_HOME CARGO_TARGET_DIR RUSTC_WRAPPER XDG_CACHE_HOME npm_config_cache NPM_CONFIG_CACHE \
  PIP_CACHE_DIR PIP_NO_CACHE_DIR PIP_FIND_LINKS SANDGATE_LOG RUST_BACKTRACE
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 npm_config_audit=false \
  npm_config_fund=false npm_config_update_notifier=false CARGO_TERM_COLOR=never

daemon_pid="" watcher_pid="" failed=0
# shellcheck disable=SC2317 # reached through the trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -n "$watcher_pid" ]] && { kill "$watcher_pid" 2>/dev/null || true; wait "$watcher_pid" 2>/dev/null || true; }
  if [[ -n "$daemon_pid" ]]; then
    "$bin" stop >/dev/null 2>&1 || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if [[ -n "${KEEP:-}" ]]; then
    echo "caches: kept $dir" >&2
  else
    # The overlays' work directories are mode 0000: `cache clear` opens them up first.
    "$bin" cache clear --all >/dev/null 2>&1 || true
    rm -rf "$dir"
  fi
  exit "$rc"
}
trap cleanup EXIT INT TERM

# --- The projects -------------------------------------------------------------------------------
mkdir -p "$dir/tmpl/cargo/src" "$dir/tmpl/npm" "$dir/tmpl/pip"
cat >"$dir/tmpl/cargo/Cargo.toml" <<'EOF'
[package]
name = "cache-bench"
version = "0.1.0"
edition = "2021"

[dependencies]
anyhow = "1"
serde_json = "1"
EOF
cat >"$dir/tmpl/cargo/src/main.rs" <<'EOF'
fn main() -> anyhow::Result<()> {
    let v: serde_json::Value = serde_json::from_str(r#"{"cached": true}"#)?;
    println!("{v}");
    Ok(())
}
EOF
cat >"$dir/tmpl/npm/package.json" <<'EOF'
{ "name": "cache-bench", "version": "1.0.0", "private": true,
  "dependencies": { "commander": "^12", "express": "^4", "lodash": "^4" } }
EOF
printf 'requests\nattrs\ndocopt\n' >"$dir/tmpl/pip/requirements.txt"
declare -A cmd=(
  [cargo]='cargo fetch && cargo build'
  [npm]='npm install'
  [pip]='venv/bin/pip install -r requirements.txt'
)
declare -A hosts=(
  [cargo]='index.crates.io static.crates.io'
  [npm]='registry.npmjs.org'
  [pip]='pypi.org files.pythonhosted.org'
)

# --- Which tools, and which addresses the proxy must be told about ------------------------------
tools=()
for t in $TOOLS; do
  case "$t" in
    cargo) need=cargo ;;
    npm) need=npm ;;
    pip) need=python3 ;;
    *) echo "caches: unknown tool $t (cargo, npm, pip)" >&2; exit 2 ;;
  esac
  if ! command -v "$need" >/dev/null; then
    echo "SKIPPED $t: $need is not installed"
  elif [[ $t == pip ]] && ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "SKIPPED pip: $py has no venv/ensurepip"
  else
    tools+=("$t")
  fi
done
((${#tools[@]} > 0)) || { echo "caches: no tool to measure" >&2; exit 2; }
names=""
for t in "${tools[@]}"; do names+=" ${hosts[$t]}"; done
# shellcheck disable=SC2086 # one argument per name
special="$(python3 - $names <<'PY'
import ipaddress, socket, sys
found = set()
for name in sys.argv[1:]:
    try:
        infos = socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)
    except OSError:
        continue
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        if not addr.is_global:
            found.add(str(addr))
print(" ".join(sorted(found)))
PY
)"
mkdir -m 0700 "$XDG_CONFIG_HOME/sandgate"
if [[ -n "$special" ]]; then
  read -r -a addrs <<<"$special"
  list="$(printf '"%s", ' "${addrs[@]}")"
  printf '[network]\nallow = [%s]\n' "${list%, }" >"$XDG_CONFIG_HOME/sandgate/config.toml"
  echo "caches: registry names resolve to special-purpose addresses ($special): the proxy's" \
    "address guard refuses those unless allowed, so the configuration allows exactly them;" \
    "the names are still asked about"
fi

# --- The daemon, the launcher link, and the watcher who answers ---------------------------------
launcher="$(dirname "$bin")/sandgate-launch"
if [[ -x "$launcher" ]]; then
  ln -s "$launcher" "$dir/bin/sandbox-build" # as `sandgate install` makes it
  build=("$dir/bin/sandbox-build")
else
  build=("$bin" build --)
fi
"$bin" daemon >"$dir/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && break; sleep 0.05; done
"$bin" status >/dev/null || { echo "caches: the daemon did not start" >&2; cat "$dir/daemon.log" >&2; exit 1; }

answers="$dir/answers.log"
: >"$answers"
# Answers every question by its host, as a person at `sandgate pending` would (the default scope:
# this sandbox's session). Each line: when answered (s), the host, when first asked (ms).
# (A sleep as the pace of a person polling, not as synchronisation: nothing waits for it.)
watcher() {
  set +e # a failed poll is tried again, never the end of the watcher
  local out
  while :; do
    out="$("$bin" pending --json 2>/dev/null || true)"
    if [[ -n "$out" && "$out" != "[]" ]]; then
      printf '%s' "$out" | python3 -c '
import json, sys
seen = {}
for q in json.load(sys.stdin):
    seen[q["host"]] = min(seen.get(q["host"], q["first_asked"]), q["first_asked"])
for host, first in seen.items():
    print(host, first)' | while read -r host first; do
        "$bin" allow "${answer[@]}" -- "$host" >/dev/null 2>&1 &&
          echo "$EPOCHREALTIME $host $first" >>"$answers"
      done
    fi
    sleep "$POLL"
  done
}
watcher &
watcher_pid=$!

# --- One run ------------------------------------------------------------------------------------
# A new, empty home named $1.
fresh_home() { mkdir -m 0700 "$dir/homes/$1"; }

# A digest of every file under a home: a sandboxed run must leave it as it was (it may only add
# the empty directory of a missing cache).
home_digest() { (cd "$1" && find . -type f -printf '%P %s %T@\n' | LC_ALL=C sort | sha256sum); }

# CPU time (clock ticks) of the daemon (whose proxy carries a sandbox's traffic) and of its
# children (the network factory): process-wide, so threads that came and went are counted.
tck="$(getconf CLK_TCK)"
daemon_ticks() {
  local pid sum=0 f=()
  for pid in "$daemon_pid" $(pgrep -P "$daemon_pid" || true); do
    # Fields 14 and 15 (utime, stime); the name in field 2 is "(sandgate)", without spaces.
    read -r -a f 2>/dev/null <"/proc/$pid/stat" || continue
    ((${#f[@]} > 15)) && sum=$((sum + f[13] + f[14]))
  done
  echo "$sum"
}

rows="$dir/rows.tsv"
printf 'tool\tscenario\tmode\tround\twall_s\tuser_s\tsys_s\trc\tquestions\twaited_s\tdaemon_cpu_s\tload\tstart_us\tend_us\n' >"$rows"

# run_one MODE(direct|build) TOOL SCENARIO ROUND HOME PROJECT
run_one() {
  local mode=$1 tool=$2 scen=$3 round=$4 home=$5 proj=$6
  local log="$dir/logs/$tool-$scen-$mode-$round.log" rc=0 before="" times q0 qs waited
  rm -rf "$proj"
  cp -a "$dir/tmpl/$tool" "$proj"
  if [[ $tool == pip ]]; then
    # ensurepip installs the bundled pip with --no-cache-dir: the caches stay as they were.
    HOME="$home" "$py" -m venv "$proj/venv"
  fi
  if [[ $mode == build ]]; then
    [[ $scen == warm ]] || (cd "$proj" && "$bin" cache clear >/dev/null)
    before="$(home_digest "$home")"
  fi
  q0=$(wc -l <"$answers")
  local t0
  t0=$(daemon_ticks)
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  local TIMEFORMAT='%R %U %S'
  local run=(sh -c "${cmd[$tool]}")
  [[ $mode == direct ]] || run=("${build[@]}" "${run[@]}")
  local start=$EPOCHREALTIME
  (cd "$proj" && { time HOME="$home" "${run[@]}" >"$log" 2>&1; } 2>"$dir/time") || rc=$?
  local end=$EPOCHREALTIME
  local dcpu
  dcpu=$(awk -v a="$t0" -v b="$(daemon_ticks)" -v t="$tck" 'BEGIN { printf "%.2f", (b - a) / t }')
  times="$(tail -n 1 "$dir/time")"
  [[ "$times" =~ ^[0-9.]+\ [0-9.]+\ [0-9.]+$ ]] || times="nan nan nan"
  read -r qs waited < <(tail -n +"$((q0 + 1))" "$answers" |
    awk '{ n++; w += $1 - $3 / 1000 } END { printf "%d %.2f\n", n, w }')
  if [[ $mode == build && "$(home_digest "$home")" != "$before" ]]; then
    echo "caches: FAILED $tool $scen round $round: the sandboxed run changed files in the host's HOME" >&2
    rc=97
  fi
  # shellcheck disable=SC2086 # $times is three fields
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$scen" "$mode" \
    "$round" $times "$rc" "$qs" "$waited" "$dcpu" "$load" "${start/./}" "${end/./}" >>"$rows"
  printf 'caches: %-5s %-9s %-6s round %s: %6.2f s (rc %s, %s questions, %s s waiting)\n' \
    "$tool" "$scen" "$mode" "$round" "${times%% *}" "$rc" "$qs" "$waited"
  if ((rc != 0)); then
    failed=1
    echo "--- $log (last 15 lines)" >&2
    tail -n 15 "$log" >&2
  fi
}

# --- The rounds ---------------------------------------------------------------------------------
echo "caches: $(basename "$bin") $("$bin" --version | cut -d' ' -f2), load $(cut -d' ' -f1-3 /proc/loadavg), scratch $dir"
for tool in "${tools[@]}"; do
  d="$dir/work/$tool-d" b="$dir/work/$tool-b" h="$dir/work/$tool-h"
  fresh_home "$tool-prime"
  run_one direct "$tool" prime 0 "$dir/homes/$tool-prime" "$d"
  hd="" hs=""
  for r in $(seq "$COLD"); do
    hd="$dir/homes/$tool-d$r" hs="$dir/homes/$tool-b$r"
    fresh_home "$tool-d$r"
    fresh_home "$tool-b$r"
    if ((r % 2)); then
      run_one direct "$tool" cold "$r" "$hd" "$d"
      run_one build "$tool" cold "$r" "$hs" "$b"
    else
      run_one build "$tool" cold "$r" "$hs" "$b"
      run_one direct "$tool" cold "$r" "$hd" "$d"
    fi
  done
  # Warm: the homes (and the layer) the last cold round filled.
  for r in $(seq "$WARM"); do
    order=(0 1 2 0 1)
    for i in "${order[@]:$((r % 3)):3}"; do
      case "$i" in
        0) run_one direct "$tool" warm "$r" "$hd" "$d" ;;
        1) run_one build "$tool" warm "$r" "$hs" "$b" ;;
        2) run_one build "$tool" hostwarm "$r" "$hd" "$h" ;;
      esac
    done
  done
done
echo "caches: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "caches: layers (\`sandgate cache ls\`):"
"$bin" cache ls | sed 's/^/  /'
# The traffic log, read once the daemon has stopped (it writes events to the store in batches).
kill "$watcher_pid" 2>/dev/null || true
wait "$watcher_pid" 2>/dev/null || true
watcher_pid=""
"$bin" stop >/dev/null
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""
"$bin" log --json >"$dir/traffic.jsonl"

# --- The table ----------------------------------------------------------------------------------
python3 - "$rows" "$dir/traffic.jsonl" "${OUT%.md}.tsv" "$POLL" "${ANSWER:-}" >"$OUT" <<'PY'
import csv, json, statistics, sys

rows_file, traffic, tsv, poll, answer = sys.argv[1:6]
rows = list(csv.DictReader(open(rows_file), delimiter="\t"))
events = [json.loads(line) for line in open(traffic) if line.strip()]
# Bytes from the registries through the proxy, per sandboxed run: the connections that began
# during it (runs never overlap). A direct run has no proxy.
for r in rows:
    start, end = int(r["start_us"]) // 1000, int(r["end_us"]) // 1000
    mine = [e for e in events if start <= e["time"] <= end and e.get("decision") == "allow"]
    r["proxy_down_bytes"] = sum(e.get("bytes_down", 0) for e in mine) if r["mode"] == "build" else ""
with open(tsv, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)

def pick(tool, scen, mode):
    return {r["round"]: r for r in rows if (r["tool"], r["scenario"], r["mode"]) == (tool, scen, mode)}
def cpu(r):
    return float(r["user_s"]) + float(r["sys_s"]) + float(r["daemon_cpu_s"])
med = statistics.median
names = {"cold": "cold", "warm": "warm (second run)", "hostwarm": "host warm, layer empty"}
print("| tool | caches | direct (s) | `build` (s) | ratio | each round | questions (waited) "
      "| ratio, wait left out | CPU ratio | MB via proxy |")
print("|---|---|---:|---:|---:|---|---|---:|---:|---:|")
for tool in dict.fromkeys(r["tool"] for r in rows):
    for scen in ("cold", "warm", "hostwarm"):
        # Host warm is compared with the direct warm run of its round: the same host caches.
        direct = pick(tool, "warm" if scen == "hostwarm" else scen, "direct")
        build = pick(tool, scen, "build")
        pairs = [(direct[k], build[k]) for k in build if k in direct]
        if not pairs:
            continue
        bad = [r for pair in pairs for r in pair if r["rc"] != "0"]
        if bad:
            print(f"| {tool} | {names[scen]} | | | FAILED | rc {bad[0]['rc']} ({bad[0]['mode']}, "
                  f"round {bad[0]['round']}) | | | | |")
            continue
        ratios = sorted(float(b["wall_s"]) / float(d["wall_s"]) for d, b in pairs)
        net = med((float(b["wall_s"]) - float(b["waited_s"])) / float(d["wall_s"]) for d, b in pairs)
        print(f"| {tool} | {names[scen]} | {med(float(d['wall_s']) for d, _ in pairs):.2f} "
              f"| {med(float(b['wall_s']) for _, b in pairs):.2f} | **{med(ratios):.2f}x** "
              f"| {', '.join(f'{x:.2f}' for x in ratios)} "
              f"| {med(int(b['questions']) for _, b in pairs):g} "
              f"({med(float(b['waited_s']) for _, b in pairs):.2f} s) | {net:.2f}x "
              f"| {med(cpu(b) / cpu(d) for d, b in pairs):.2f}x "
              f"| {med(b['proxy_down_bytes'] for _, b in pairs) / 1e6:.1f} |")
loads = [float(r["load"]) for r in rows]
print()
print(f"Wall time: median of the rounds; ratio: median of `build` / direct in the same round. "
      f"Questions: asked per sandboxed run, answered by a watcher polling `sandgate pending` "
      f"every {poll} s with `sandgate allow{' ' + answer if answer else ''} HOST`; the time they "
      f"waited (median) is inside the `build` time and left out of the next column. CPU: user + "
      f"system time of every process of the run, and for `build` the daemon's (its proxy) during "
      f"it. MB via proxy: what the registries sent to the sandbox (median). Load average "
      f"{min(loads):.1f}-{max(loads):.1f}.")
PY
echo
cat "$OUT"
echo "caches: every run in ${OUT%.md}.tsv"
exit "$failed"
