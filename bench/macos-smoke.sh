#!/usr/bin/env bash
# macOS smoke test: runs each tier for real under sandbox-exec and checks the rows the Linux test
# suite checks with namespaces. It CANNOT run on Linux (the project's machines test the profile as
# text only); a Mac user or the macOS CI runner (.github/workflows/macos.yml) runs it:
#
#   cargo build -p sandgate && bench/macos-smoke.sh            # or SANDGATE=/path/to/sandgate
#
# Each row prints PASS/FAIL; the script exits non-zero when any row fails. Nothing outside its
# own temporary directory is written; traffic goes only to a server on 127.0.0.1 it starts.
set -uo pipefail
[ "$(uname -s)" = Darwin ] || { echo "macos-smoke: macOS only (uname: $(uname -s))" >&2; exit 2; }
cd "$(dirname "$0")/.."
bin="${SANDGATE:-$PWD/target/debug/sandgate}"
[ -x "$bin" ] || { echo "macos-smoke: build first (cargo build -p sandgate) or set SANDGATE" >&2; exit 2; }

# Under /tmp on purpose: Seatbelt sees /private/tmp, so every path below also proves that the
# profile's paths are canonical.
dir="$(mktemp -d /tmp/sandgate-smoke.XXXXXX)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
# The launcher serves the proxy itself (no daemon to ask: unknown hosts are refused).
export SANDGATE_NO_DAEMON=1 SANDGATE_QUIET=1

# A credential outside $HOME (hidden through SANDGATE_EXTRA_DENY), reached also through a link.
mkdir -p "$dir/secret" "$dir/links"
echo "TOKEN=smoke" >"$dir/secret/token"
ln -s "$dir/secret" "$dir/links/secret-link"
export SANDGATE_EXTRA_DENY="$dir/links/secret-link"

# A repository to work in (build tier: writable, .git protected).
repo="$dir/repo"
git init -q "$repo" && git -C "$repo" -c user.email=s@x -c user.name=s commit -q --allow-empty -m init

# A local HTTP server: the only destination, allowed by IP.
mkdir -p "$dir/www" && echo hello >"$dir/www/index.html"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
(cd "$dir/www" && exec python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1) &
server_pid=$!
for _ in $(seq 50); do curl -s "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done

fails=0
# row NAME WANT(ok|fail) TIER [launcher flags...] -- COMMAND...
row() {
  local name="$1" want="$2" tier="$3"; shift 3
  local out rc
  out="$(cd "$repo" && "$bin" "$tier" "$@" 2>&1)"; rc=$?
  if { [ "$want" = ok ] && [ $rc -eq 0 ]; } || { [ "$want" = fail ] && [ $rc -ne 0 ]; }; then
    printf 'PASS  %-5s %s\n' "$tier" "$name"
  else
    printf 'FAIL  %-5s %s (exit %s, wanted %s)\n%s\n' "$tier" "$name" "$rc" "$want" "$out" | sed '2,$s/^/      /'
    fails=$((fails + 1))
  fi
}

for tier in run net build; do
  row "bash runs" ok "$tier" -- bash -c 'echo ok'
  row "git status (xcrun shim)" ok "$tier" -- /usr/bin/git status --short
  row "python3 (xcrun shim)" ok "$tier" -- /usr/bin/python3 -c 'print(1)'
  row "write outside is refused" fail "$tier" -- touch "$dir/outside-$tier"
  row "credential read is refused (link)" fail "$tier" -- cat "$dir/links/secret-link/token"
  row "credential read is refused (target)" fail "$tier" -- cat "$dir/secret/token"
  row "direct connection is refused" fail "$tier" -- curl -s --max-time 5 --noproxy '*' "http://127.0.0.1:$port/"
  row "TIOCSTI is refused" fail "$tier" -- script -q /dev/null python3 -c \
    'import fcntl, termios, sys; fcntl.ioctl(0, termios.TIOCSTI, b"x")'
  row "unix socket in the private TMPDIR" ok "$tier" -- python3 -c \
    'import os, socket; s=socket.socket(socket.AF_UNIX); s.bind(os.environ["TMPDIR"]+"/s"); s.listen(1)'
  row "loopback listen (test server)" ok "$tier" -- python3 -c \
    'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(1)'
  row "nested, same tier: runs in place" ok "$tier" -- "$bin" "$tier" -- true
done
[ -e "$dir/outside-run" ] && { echo "FAIL  a refused write left a file"; fails=$((fails + 1)); }

row "curl through the proxy" ok net --allow 127.0.0.1 -- curl -sf --max-time 10 --noproxy '' "http://127.0.0.1:$port/"
row "curl through the proxy" ok build --allow 127.0.0.1 -- curl -sf --max-time 10 --noproxy '' "http://127.0.0.1:$port/"
row "a host not allowed is refused by the proxy" fail net -- curl -sf --max-time 10 --noproxy '' "http://127.0.0.1:$port/"
row "no network in run" fail run -- curl -sf --max-time 5 --noproxy '' "http://127.0.0.1:$port/"
row "write in the working directory" ok build -- touch "$repo/built"
# A hard link would give the hidden file a second, unhidden name inside a writable path.
row "hard link to a hidden file is refused" fail build -- ln "$dir/secret/token" "$repo/stolen"
row "moving a hidden file out is refused" fail build -- mv "$dir/secret/token" "$repo/stolen"
row "git hook write is refused" fail build -- sh -c 'echo x >.git/hooks/pre-commit'
row "git config write is refused" fail build -- git config core.fsmonitor evil
row "renaming .git is refused" fail build -- mv .git moved
row "nested hooks (any depth) are refused" fail build -- sh -c 'mkdir -p sub/.git/hooks 2>/dev/null; echo x >sub/.git/hooks/post-checkout'
row "nested, narrower tier: explained" fail build -- "$bin" run -- true
out="$(cd "$repo" && "$bin" build -- "$bin" run -- true 2>&1)"
if grep -q "sandbox_apply: Operation not permitted" <<<"$out"; then
  echo "PASS  build nested narrower tier names the reason"
else
  echo "FAIL  build nested narrower tier names the reason: $out"; fails=$((fails + 1))
fi

# Refusals are logged with the sandbox id (what the daemon turns into `blocked` events).
if log show --last 2m --style compact --predicate 'eventMessage CONTAINS "sandgate:"' 2>/dev/null \
  | grep -q "sandgate:sg-"; then
  echo "PASS  refusals are in the log with sandgate:<id>"
else
  echo "FAIL  no refusal with sandgate:<id> in \`log show\`"; fails=$((fails + 1))
fi

echo "macos-smoke: $fails failing row(s)"
exit $((fails > 0))
