#!/usr/bin/env bash
# Launch cost of hiding the home directory's dot-entries: `sandgate run -- true` with a HOME of N
# dot-entries (half directories with a file, half files; none on the allowlist, so every one is
# hidden) against the same HOME with none, for each given binary (e.g. the one of main and this
# branch's). No daemon (`run` needs none). Needs hyperfine.
# Usage: bench/home-secrets.sh [-n N] SANDGATE_BINARY...   (N default 150)
# Measured on the shared 2-core test machine (debug builds, HOME of 150, other builds running:
# wall-clock means swing by 30 ms between runs, so compare user+sys): main 10.3 ms CPU (mean
# 33.5 ms over 80 runs); one tmpfs per hidden directory 20.9 ms CPU (87.5 ms); binds of one
# empty directory, resolution of parents cached, allowlist indexed by first component 12-15 ms
# CPU (33.5-94 ms, as noisy as main's 38-62 ms in the same runs). With an empty HOME: main
# 10.4 ms, this branch 11.7 ms CPU.
set -euo pipefail
N=150
while getopts "n:h" opt; do
  case "$opt" in
    n) N="$OPTARG" ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,14p' "$0"; exit 2; }
bins=(); for b in "$@"; do bins+=("$(realpath "$b")"); done
dir="$(mktemp -d /var/tmp/sandgate-bench-home.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/full" "$dir/empty" "$dir/run"
for i in $(seq 1 $((N / 2))); do
  mkdir -p "$dir/full/.bench-d$i" && echo x >"$dir/full/.bench-d$i/f"
  echo y >"$dir/full/.bench-f$i"
done
export SANDGATE_NO_DAEMON=1 XDG_RUNTIME_DIR="$dir/run"
cd "$dir"
cmds=()
for bin in "${bins[@]}"; do
  cmds+=(-n "$(basename "$bin") HOME of $N" "env HOME=$dir/full $bin run -- true")
  cmds+=(-n "$(basename "$bin") HOME of 0" "env HOME=$dir/empty $bin run -- true")
done
hyperfine -N --warmup 5 --runs "${RUNS:-60}" "${cmds[@]}"
