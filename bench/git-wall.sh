#!/usr/bin/env bash
# Cost of the git metadata wall at launch: median wall-clock time of `sandgate build -- true` in a
# repository whose index holds N entries and S gitlinks (uninitialised submodules), against the
# same launch in a repository with an empty index.
#
# Usage: bench/git-wall.sh [SANDGATE_BINARY]   (N=100000 S=50 RUNS=15 from the environment)
# Without a binary, uses target/debug/sandgate (say which one you measured). Needs root (build
# tier). Everything lives in a temp dir under /var/tmp (own HOME and XDG dirs, so a daemon of its
# own), removed at exit. No network.
#
# Measured (debug build, 2 shared cores at load ~13, so ±30 ms noise): 100k entries, no gitlinks:
# +9 ms over an empty index with gix-index at opt-level 2 in the dev profile (+445 ms without);
# 100k entries + 50 uninitialised submodules (50 more read-only mounts): +54 ms.
set -euo pipefail

N="${N:-100000}" S="${S:-50}" RUNS="${RUNS:-15}"
BIN="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/debug/sandgate}"
[[ -x "$BIN" ]] || { echo "git-wall: $BIN not found" >&2; exit 2; }
DIR="$(mktemp -d /var/tmp/sandgate-gitwall.XXXXXX)"
export HOME="$DIR/home" XDG_CONFIG_HOME="$DIR/home/.config" XDG_DATA_HOME="$DIR/home/.local/share"
export XDG_RUNTIME_DIR="$DIR/run" GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=n GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=n GIT_COMMITTER_EMAIL=a@b
cleanup() {
  [[ -f "$DIR/run/sandgate/daemon.pid" ]] && kill "$(cat "$DIR/run/sandgate/daemon.pid")" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT
mkdir -p "$HOME/.config/sandgate" "$HOME/.local/share/sandgate" "$XDG_RUNTIME_DIR"

git init -q "$DIR/empty"
git init -q "$DIR/big"
blob="$(git -C "$DIR/big" hash-object -w --stdin </dev/null)"
commit="$(git -C "$DIR/big" commit-tree "$(git -C "$DIR/big" mktree </dev/null)" -m x)"
{
  for ((i = 0; i < N; i++)); do printf '100644 %s\tsrc/d%d/f%d\n' "$blob" $((i / 100)) "$i"; done
  for ((i = 0; i < S; i++)); do printf '160000 %s\tmods/m%d\n' "$commit" "$i"; done
} | git -C "$DIR/big" update-index --index-info
mkdir -p "$DIR/big/mods"
for ((i = 0; i < S; i++)); do mkdir "$DIR/big/mods/m$i"; done

median() {
  local dir="$1" times=()
  (cd "$dir" && "$BIN" build -- true) # warm-up, starts the daemon
  for ((r = 0; r < RUNS; r++)); do
    local t0 t1
    t0=$(date +%s%N)
    (cd "$dir" && "$BIN" build -- true)
    t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p"
}

empty=$(median "$DIR/empty")
big=$(median "$DIR/big")
idx=$(stat -c %s "$DIR/big/.git/index")
echo "git-wall: $BIN"
echo "git-wall: empty index: median ${empty} us over $RUNS launches"
echo "git-wall: $N entries + $S gitlinks (index ${idx} bytes): median ${big} us (+$((big - empty)) us)"
