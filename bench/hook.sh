#!/usr/bin/env bash
# Time of one `sandgate hook claude` decision, as Claude Code runs it: a process per tool call,
# the hook JSON on stdin. Cases: an allowed wrapped command, a refused injection, a file-tool read
# and write (policy loaded, paths resolved); with a daemon running (the event line is sent) and
# without. Needs hyperfine (the shell redirects stdin; hyperfine subtracts the shell's own start-up).
# Usage: PROFILE=release bench/hook.sh [extra hyperfine args]   (PROFILE=debug for a debug build)
# Results: bench/hook.md (hyperfine's table).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
if [ "$profile" = release ]; then cargo build --release --bin sandgate >/dev/null; else cargo build --bin sandgate >/dev/null; fi
bin="$PWD/target/$profile/sandgate"
dir="$(mktemp -d /var/tmp/sandgate-hookbench.XXXXXX)"
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME" "$dir/bin" "$dir/proj/src"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for n in sandbox-run sandbox-net sandbox-build; do ln -s "$bin" "$dir/bin/$n"; done
export PATH="$dir/bin:$PATH"
echo 'fn main() {}' >"$dir/proj/src/main.rs"
input() { # tool, tool_input JSON
  printf '{"hook_event_name":"PermissionRequest","tool_name":"%s","tool_input":%s,"cwd":"%s"}' "$1" "$2" "$dir/proj"
}
input Bash '{"command":"sandbox-build cargo test 2>&1 | sandbox-run tail -n 5"}' >"$dir/allow.json"
input Bash '{"command":"sandbox-run ls; rm -rf ~"}' >"$dir/refuse.json"
input Read "{\"file_path\":\"$dir/proj/src/main.rs\"}" >"$dir/read.json"
input Write "{\"file_path\":\"$dir/proj/src/new.rs\",\"content\":\"x\"}" >"$dir/write.json"
cd "$dir/proj"
run() {
  hyperfine --warmup 20 --runs "${RUNS:-300}" "$@" \
    -n "bash allowed$suffix" "$bin hook claude <$dir/allow.json" \
    -n "bash refused$suffix" "$bin hook claude <$dir/refuse.json" \
    -n "Read$suffix" "$bin hook claude <$dir/read.json" \
    -n "Write$suffix" "$bin hook claude <$dir/write.json"
}
suffix=" (no daemon)" run --export-markdown "$dir/a.md" --export-json "$dir/a.json" "$@"
"$bin" daemon >"$dir/daemon.log" 2>&1 &
for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && break; sleep 0.05; done
suffix=" (daemon running)" run --export-markdown "$dir/b.md" --export-json "$dir/b.json" "$@"
# Medians and CPU time (user + system) too: on a loaded machine the wall-clock mean mostly
# measures waiting for a core.
summary() {
  python3 - "$dir/a.json" "$dir/b.json" <<'PY'
import json, sys
print("| case | median [ms] | min [ms] | CPU user+sys [ms] |")
print("|---|---:|---:|---:|")
for f in sys.argv[1:]:
    for r in json.load(open(f))["results"]:
        print(f"| {r['command']} | {r['median']*1e3:.2f} | {r['min']*1e3:.2f} | {(r['user']+r['system'])*1e3:.2f} |")
PY
}
{ echo "Profile: $profile. $(date -u +%F), load average $(cut -d' ' -f1-3 /proc/loadavg)"; echo;
  echo "The hook process alone (no shell; wait4 rusage), daemon running:"; echo;
  python3 "$OLDPWD/bench/hook_rusage.py" "$bin" "${RUNS:-300}" "$dir"/{allow,refuse,read,write}.json; echo;
  echo "hyperfine (through a shell, which it subtracts):"; echo;
  summary; echo; cat "$dir/a.md"; echo; tail -n +3 "$dir/b.md"; } >"$OLDPWD/bench/hook.md"
cat "$OLDPWD/bench/hook.md"
