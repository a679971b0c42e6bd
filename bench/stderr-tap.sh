#!/usr/bin/env bash
# What reading the command's stderr for "Read-only file system" costs (issue 17, item 7): the same
# launches with the relay (default) and without it (`--quiet`, which turns it off), with stderr a
# file (the relay's pipe and thread in between). Three workloads: a command that writes nothing
# (the launch itself), 64 MiB written to stderr in 64 KiB blocks (no newline, and 70-byte lines),
# and 64 MiB to stdout with stderr on the same file (`>log 2>&1`: both go through the relay).
#
# Usage: bench/stderr-tap.sh [SANDGATE_BINARY]   (default target/debug/sandgate)
# Needs root (namespaces) and hyperfine. Writes only under a temp dir in /var/tmp.
set -euo pipefail
SG="${1:-$(dirname "$0")/../target/debug/sandgate}"
SG="$(realpath "$SG")"
dir="$(mktemp -d /var/tmp/sandgate-tap.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
cd "$dir"
big='head -c 67108864 /dev/zero'
lines='yes warning: unused variable x in src/some/module.rs line 42 col 7 | head -c 67108864'
hyperfine -N --warmup 3 --runs "${RUNS:-20}" --export-markdown "$dir/out.md" \
  -n "nothing, relay" "sh -c '$SG run -- true 2>$dir/e'" \
  -n "nothing, --quiet" "sh -c '$SG run --quiet -- true 2>$dir/e'" \
  -n "64 MiB stderr, relay" "sh -c '$SG run -- sh -c \"$big >&2\" 2>$dir/e'" \
  -n "64 MiB stderr, --quiet" "sh -c '$SG run --quiet -- sh -c \"$big >&2\" 2>$dir/e'" \
  -n "64 MiB of 70-byte lines on stderr, relay" "sh -c '$SG run -- sh -c \"$lines >&2\" 2>$dir/e'" \
  -n "64 MiB of 70-byte lines on stderr, --quiet" "sh -c '$SG run --quiet -- sh -c \"$lines >&2\" 2>$dir/e'" \
  -n "64 MiB stdout 2>&1, relay" "sh -c '$SG run -- sh -c \"$big\" >$dir/o 2>&1'" \
  -n "64 MiB stdout 2>&1, --quiet" "sh -c '$SG run --quiet -- sh -c \"$big\" >$dir/o 2>&1'"
cat "$dir/out.md"
