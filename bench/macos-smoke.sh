#!/usr/bin/env bash
# Probes are single-quoted on purpose (they expand inside the sandbox, or the control's shell),
# row names spell ~ as text, and cleanup runs from the EXIT trap:
# shellcheck disable=SC2016,SC2088,SC2317
# macOS escape suite: runs each tier for real under sandbox-exec, with the daemon running, and
# tries each hole the reviews found (issue 20's and issue 34's). It CANNOT run on Linux (the
# project's machines test the profile as text: sandbox/tests/seatbelt_golden.rs); a Mac user or
# the macOS CI runner (.github/workflows/macos.yml) runs it:
#
#   cargo build -p sandgate && bench/macos-smoke.sh            # or SANDGATE=/path/to/sandgate
#   SANDGATE_SMOKE_PF=1 bench/macos-smoke.sh                   # + the pf rows (sudo, no password)
#
# Every escape row has three parts: a control (the same probe, run outside the sandbox, must
# succeed: the probe can catch the hole), the probe inside (must fail), and the exact error the
# refusal gives (usually "Operation not permitted"). A row whose control fails is a FAIL too: it
# proves nothing. Functional rows (what must keep working) only run inside. Each row prints
# PASS/FAIL; the script exits non-zero when any row fails. Writes stay in its own temporary
# directory, the repository it makes, and named files it removes again; traffic goes to a server
# on 127.0.0.1 it starts (and one DNS lookup of example.com, the mDNSResponder row's control).
set -uo pipefail
[ "$(uname -s)" = Darwin ] || { echo "macos-smoke: macOS only (uname: $(uname -s))" >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
bin="${SANDGATE:-$PWD/target/debug/sandgate}"
[ -x "$bin" ] || { echo "macos-smoke: build first (cargo build -p sandgate) or set SANDGATE" >&2; exit 2; }

EPERM="Operation not permitted"

# Under /tmp on purpose: Seatbelt sees /private/tmp, so every path below also proves that the
# profile's paths are canonical.
dir="$(mktemp -d /tmp/sandgate-smoke.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  "$bin" stop >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME/sandgate"
export SANDGATE_QUIET=1
unset SANDGATE_NO_DAEMON
# Nobody answers questions here: unknown hosts are refused after two seconds.
printf '[daemon]\nask_timeout = "2s"\n' >"$XDG_CONFIG_HOME/sandgate/config.toml"

# The daemon, as a user runs it (the launcher would start it; started here to see it run).
"$bin" daemon >"$dir/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" status >/dev/null 2>&1 || { echo "macos-smoke: the daemon did not start"; cat "$dir/daemon.log"; exit 1; }

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
pids+=($!)
for _ in $(seq 50); do curl -s "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done

fails=0
pass() { printf 'PASS  %-5s %s\n' "$1" "$2"; }
fail() {
  printf 'FAIL  %-5s %s\n' "$1" "$2"
  [ -n "${3:-}" ] && sed 's/^/      /' <<<"$3"
  fails=$((fails + 1))
}

# escape NAME TIER ERROR PROBE [CLEANUP]: PROBE (bash, run in the repository) must succeed
# outside the sandbox and fail inside with ERROR in its output ("" for probes whose refusal has
# no message: the exit status alone). CLEANUP runs after each. Launcher flags: $SGF.
escape() {
  local name="$1" tier="$2" err="$3" probe="$4" undo="${5:-}" out rc
  out="$(cd "$repo" && bash -c "$probe" 2>&1)"; rc=$?
  [ -n "$undo" ] && (cd "$repo" && bash -c "$undo") >/dev/null 2>&1
  if [ $rc -ne 0 ]; then
    fail "$tier" "$name: the control failed outside the sandbox (exit $rc)" "$out"
    return
  fi
  # shellcheck disable=SC2086 # SGF holds launcher flags, split on purpose
  out="$(cd "$repo" && "$bin" "$tier" ${SGF:-} -- bash -c "$probe" 2>&1)"; rc=$?
  [ -n "$undo" ] && (cd "$repo" && bash -c "$undo") >/dev/null 2>&1
  if [ $rc -ne 0 ] && grep -qF -- "$err" <<<"$out"; then
    pass "$tier" "$name"
  else
    fail "$tier" "$name (exit $rc, wanted a refusal with \"$err\")" "$out"
  fi
}

# works NAME TIER PROBE: PROBE must succeed inside.
works() {
  local name="$1" tier="$2" probe="$3" out rc
  # shellcheck disable=SC2086
  out="$(cd "$repo" && "$bin" "$tier" ${SGF:-} -- bash -c "$probe" 2>&1)"; rc=$?
  if [ $rc -eq 0 ]; then pass "$tier" "$name"; else fail "$tier" "$name (exit $rc)" "$out"; fi
}

# ---- what must keep working ----
for tier in run net build; do
  works "bash runs" "$tier" 'echo ok'
  works "git status (/usr/bin shim)" "$tier" '/usr/bin/git status --short'
  works "python3 (/usr/bin shim)" "$tier" '/usr/bin/python3 -c "print(1)"'
  works "real toolchain first on PATH" "$tier" 'test -n "$DEVELOPER_DIR" && case "$(command -v git)" in "$DEVELOPER_DIR"/*) ;; *) exit 1;; esac'
  works "clang compiles (module cache of its own)" "$tier" \
    'printf "#include <stdio.h>\nint main(void){return 0;}\n" | clang -fmodules -x c - -o "$TMPDIR/a.out" && "$TMPDIR/a.out"'
  works "unix socket in the private TMPDIR" "$tier" \
    'python3 -c "import os, socket; s=socket.socket(socket.AF_UNIX); s.bind(os.environ[\"TMPDIR\"]+\"/s\"); s.listen(1)"'
  escape "loopback listen (off by default: the host's loopback)" "$tier" "$EPERM" \
    'python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(1)"'
  works "TMPDIR is its own, 0700" "$tier" 'test "$(stat -f %Lp "$TMPDIR")" = 700 && test -O "$TMPDIR"'
  works "/dev/stdout, /dev/fd/1" "$tier" 'echo a >/dev/stdout && echo b >/dev/fd/1'
  works "a pty made inside, /dev/tty" "$tier" 'script -q /dev/null bash -c "echo hi >/dev/tty"'
  works "POSIX shared memory of its own (Python)" "$tier" \
    'python3 -c "from multiprocessing import shared_memory as s; m=s.SharedMemory(create=True, size=16); m.close(); m.unlink()"'
  works "~/Library is searchable (stat)" "$tier" 'stat ~/Library >/dev/null'
  works "nested, same tier: runs in place" "$tier" "\"$bin\" $tier -- true"
done
# [macos] loopback_listen = true: listening on loopback (test servers), asked for by name.
cp "$XDG_CONFIG_HOME/sandgate/config.toml" "$dir/config.saved"
printf '[macos]\nloopback_listen = true\n' >>"$XDG_CONFIG_HOME/sandgate/config.toml"
for tier in run net build; do
  works "loopback listen with [macos] loopback_listen" "$tier" \
    'python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(1)"'
done
cp "$dir/config.saved" "$XDG_CONFIG_HOME/sandgate/config.toml"
works "write in the working directory" build 'touch built && rm built'
works "git commit (objects, refs, index of the existing .git)" build \
  'git -c user.email=s@x -c user.name=s commit -q --allow-empty -m inside'
works "an allowlisted dot-entry (.venv)" build 'mkdir -p .venv && touch .venv/x && rm -rf .venv'
SGF="--allow 127.0.0.1" works "curl through the proxy (allowed)" net "curl -sf --max-time 10 http://127.0.0.1:$port/"
SGF="--allow 127.0.0.1" works "curl through the proxy (allowed)" build "curl -sf --max-time 10 http://127.0.0.1:$port/"

# ---- the first review (issue 20) ----
# A keychain item for the `security` row's control (removed at the end).
security add-generic-password -U -s sandgate-smoke -a smoke -w smoke-secret >/dev/null 2>&1
for tier in run net build; do
  escape "write outside the writable paths" "$tier" "$EPERM" "touch '$dir/outside-$tier'" "rm -f '$dir/outside-$tier'"
  escape "credential read (through the link)" "$tier" "$EPERM" "cat '$dir/links/secret-link/token'"
  escape "credential read (canonical path)" "$tier" "$EPERM" "cat '$dir/secret/token'"
  escape "credential read (/private spelling)" "$tier" "$EPERM" "cat '/private$dir/secret/token'"
  escape "direct connection past the proxy" "$tier" "(7)" \
    "curl -sSf --max-time 5 --noproxy '*' http://127.0.0.1:$port/"
  escape "DNS through mDNSResponder" "$tier" "gaierror" \
    "python3 -c 'import socket; socket.getaddrinfo(\"example.com\", 443)'"
  escape "TIOCSTI (typing into the terminal)" "$tier" "" \
    "script -q /dev/null python3 -c 'import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b\" \")'"
  escape "pbpaste (the clipboard)" "$tier" "" \
    "echo sandgate-smoke | pbcopy; pbpaste | grep -q sandgate-smoke" "printf '' | pbcopy"
  escape "open (LaunchServices starts an app outside)" "$tier" "" "open -g -j -a TextEdit" \
    "osascript -e 'quit app \"TextEdit\"'"
  escape "osascript (AppleEvents to another app)" "$tier" "" \
    "osascript -e 'tell application \"System Events\" to get name'"
  escape "launchctl submit (a job outside the sandbox)" "$tier" "" \
    "launchctl submit -l sandgate.smoke.$tier -- /usr/bin/true" "launchctl remove sandgate.smoke.$tier"
  escape "security find-generic-password (keychain)" "$tier" "" \
    "security find-generic-password -s sandgate-smoke -w >/dev/null" ""
done
escape "LaunchAgents (run at login)" build "$EPERM" \
  "touch ~/Library/LaunchAgents/sandgate-smoke.plist" "rm -f ~/Library/LaunchAgents/sandgate-smoke.plist"
escape "hard link to a hidden file" build "$EPERM" "ln '$dir/secret/token' stolen" "rm -f stolen"
escape "moving a hidden file out" build "$EPERM" "mv '$dir/secret/token' stolen" "mv stolen '$dir/secret/token'"
escape "git hook write" build "$EPERM" "echo x >.git/hooks/pre-commit" "rm -f .git/hooks/pre-commit"
escape "git config write" build "$EPERM" "git config core.fsmonitor evil" "git config --unset core.fsmonitor"
escape "renaming .git (ancestor of the hooks)" build "$EPERM" "mv .git moved" "[ -d moved ] && mv moved .git"
escape "nested repository hooks (any depth)" build "$EPERM" \
  "mkdir -p sub/.git/hooks && echo x >sub/.git/hooks/post-checkout" "rm -rf sub"
out="$(cd "$repo" && "$bin" build -- "$bin" run -- true 2>&1)"; rc=$?
if [ $rc -ne 0 ] && grep -qF "sandbox_apply: $EPERM" <<<"$out"; then
  pass build "nested, narrower tier: refused with the reason"
else
  fail build "nested, narrower tier: refused with the reason (exit $rc)" "$out"
fi
out="$(cd "$repo" && "$bin" net -- curl -sSf --max-time 10 "http://127.0.0.1:$port/" 2>&1)"; rc=$?
if [ $rc -ne 0 ] && grep -q "403" <<<"$out"; then pass net "a host not allowed: 403 from the proxy"
else fail net "a host not allowed: 403 from the proxy (exit $rc)" "$out"; fi

# ---- issue 34 ----
# 1. The top-level rule, and the host-tool names below the top, in any case.
for f in .cargo/config.toml rust-toolchain.toml RUST-TOOLCHAIN.TOML .yarnrc.yml mise.toml \
  gradle.properties a.code-workspace .zzz-new sub/.envrc sub/deeper/.CARGO/config.toml; do
  escape "top-level rule: create $f" build "$EPERM" \
    "mkdir -p \"\$(dirname '$f')\" && echo x >'$f'" "rm -rf '${f%%/*}'"
done
escape "top-level rule: a new .git below the top" build "$EPERM" "mkdir -p sub && git init -q sub" "rm -rf sub"
out="$(cd "$repo" && "$bin" build --require-full -- true 2>&1)"; rc=$?
ctl="$(cd "$repo" && "$bin" build -- true 2>&1)"; crc=$?
if [ $crc -eq 0 ] && [ $rc -ne 0 ] && grep -qF "full enforcement was required" <<<"$out"; then
  pass build "--require-full refuses what Seatbelt cannot enforce (control: without it, runs)"
else
  fail build "--require-full refuses what Seatbelt cannot enforce (exit $rc, control exit $crc)" "$out$ctl"
fi
# 2. ~/Library, in any case.
for tier in run net build; do
  escape "~/Library/Keychains listed" "$tier" "$EPERM" "ls ~/Library/Keychains >/dev/null"
  escape "~/library/keychains (another case)" "$tier" "$EPERM" "ls ~/library/keychains >/dev/null"
  escape "~/Library/Application Support listed" "$tier" "$EPERM" "ls ~/'Library/Application Support' >/dev/null"
  escape "~/Library/Preferences of other apps" "$tier" "$EPERM" "ls ~/Library/Preferences >/dev/null"
done
# 3. Caches the host trusts.
for tier in run build; do
  escape "user cache dir: clang module cache" "$tier" "$EPERM" \
    'd="$(getconf DARWIN_USER_CACHE_DIR)clang/ModuleCache"; mkdir -p "$d" && touch "$d/sandgate-smoke"' \
    'rm -f "$(getconf DARWIN_USER_CACHE_DIR)clang/ModuleCache/sandgate-smoke"'
  escape "user cache dir: a link" "$tier" "$EPERM" \
    'ln -s /etc/hosts "$(getconf DARWIN_USER_CACHE_DIR)sandgate-smoke-link"' \
    'rm -f "$(getconf DARWIN_USER_CACHE_DIR)sandgate-smoke-link"'
  escape "xcrun_db in the user temp dir" "$tier" "$EPERM" \
    'touch "$(getconf DARWIN_USER_TEMP_DIR)xcrun_db-sandgate-smoke"' \
    'rm -f "$(getconf DARWIN_USER_TEMP_DIR)xcrun_db-sandgate-smoke"'
done
# 4. Another terminal: a pty held open outside, by path.
python3 -c 'import os, pty, sys, time; m, s = pty.openpty(); print(os.ttyname(s), flush=True); time.sleep(3600)' \
  >"$dir/other-tty" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do [ -s "$dir/other-tty" ] && break; sleep 0.1; done
other_tty="$(cat "$dir/other-tty")"
for tier in run build; do
  escape "another terminal ($other_tty) opened" "$tier" "$EPERM" \
    "python3 -c 'import os; os.close(os.open(\"$other_tty\", os.O_RDWR | os.O_NOCTTY))'"
done
# 5. A double-forked process does not outlive the launch.
ctl="$(sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!')"
out="$(cd "$repo" && "$bin" run -- sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!' 2>&1)"
left="$(head -1 <<<"$out")"
if kill -0 "$ctl" 2>/dev/null && [ -n "$left" ] && ! kill -0 "$left" 2>/dev/null \
  && grep -q "outlived the command: killed" <<<"$out"; then
  pass run "a double-forked process is killed at the end (control: outside it lives on)"
else
  fail run "a double-forked process is killed at the end (control pid $ctl, inside pid $left)" "$out"
fi
kill "$ctl" 2>/dev/null; kill "$left" 2>/dev/null
# 6. Nested run in place never drops a narrowing flag.
for flags in "--net none" "--deny example.com" "--allow example.com"; do
  out="$(cd "$repo" && "$bin" net -- "$bin" net $flags -- true 2>&1)"; rc=$?
  ctl="$(cd "$repo" && "$bin" net -- "$bin" net -- true 2>&1)"; crc=$?
  if [ $crc -eq 0 ] && [ $rc -ne 0 ] && grep -qF -- "${flags%% *}" <<<"$out"; then
    pass net "nested with $flags: refused (control: without it, runs in place)"
  else
    fail net "nested with $flags: refused (exit $rc, control exit $crc)" "$out$ctl"
  fi
done
# 7. Case: hidden and read-only paths under another spelling.
escape "hidden path in another case" run "$EPERM" "cat '$dir/SECRET/token'"
escape "git hook in another case (.GIT/HOOKS)" build "$EPERM" "echo x >.GIT/HOOKS/pre-commit" "rm -f .git/hooks/pre-commit"
# 9. Another sandbox's TMPDIR (made here outside, as an earlier launch would have).
other_tmp="$(python3 -c 'import tempfile; print(tempfile.gettempdir())')/sandgate-sg-smoke-other"
mkdir -p "$other_tmp" && echo x >"$other_tmp/secret"
escape "another sandbox's TMPDIR" run "$EPERM" "cat '$other_tmp/secret'"
rm -rf "$other_tmp"

# ---- issue 34, the red team of round two's profile ----
# Another spelling of a hidden path: the data volume's (firmlinks), and `ſ` (U+017F), which
# APFS's case folding takes for `s` (the row is skipped where the volume does not fold it).
escape "hidden path, data volume spelling" run "$EPERM" "cat '/System/Volumes/Data/private$dir/secret/token'"
if (cat "$dir/ſecret/token" >/dev/null 2>&1); then
  escape "hidden path spelled with ſ (APFS folds it to s)" run "$EPERM" "cat '$dir/ſecret/token'"
else
  echo "SKIP  run   hidden path spelled with ſ: this volume does not fold ſ to s"
fi
# Devices are read by name only: an unused BSD pty, a serial port (other terminals, ports).
escape "a device not named (BSD pty /dev/ptyp9)" run "$EPERM" \
  "python3 -c 'import os; os.close(os.open(\"/dev/ptyp9\", os.O_RDONLY | os.O_NOCTTY))'"
if ls /dev/cu.* >/dev/null 2>&1; then
  escape "a serial port (/dev/cu.*)" run "$EPERM" \
    "python3 -c 'import glob, os; os.close(os.open(sorted(glob.glob(\"/dev/cu.*\"))[0], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))'"
fi
works "/dev/stdin, /dev/fd listing, /dev/urandom" run 'echo x | cat /dev/stdin >/dev/null && ls /dev/fd >/dev/null && head -c1 /dev/urandom >/dev/null'
# A writable path that is ~/Library itself: the keychains stay hidden, LaunchAgents read-only.
SGF="--allow-write $HOME/Library" escape "LaunchAgents under --allow-write ~/Library" run "$EPERM" \
  "touch ~/Library/LaunchAgents/sandgate-smoke.plist" "rm -f ~/Library/LaunchAgents/sandgate-smoke.plist"
SGF="--allow-write $HOME/Library" escape "Keychains under --allow-write ~/Library" run "$EPERM" \
  "ls ~/Library/Keychains >/dev/null"
# The reaping kills this launch's processes only: one under another program's profile that
# allows everything (as Homebrew's build sandbox) lives on.
sandbox-exec -p '(version 1)(allow default)' sleep 300 </dev/null >/dev/null 2>&1 &
foreign=$!
pids+=("$foreign")
out="$(cd "$repo" && "$bin" run -- true 2>&1)"
if kill -0 "$foreign" 2>/dev/null; then
  pass run "a process under another program's (allow default) profile is not reaped"
else
  fail run "a process under another program's (allow default) profile was killed" "$out"
fi

security delete-generic-password -s sandgate-smoke >/dev/null 2>&1

# ---- the guest-user pf fence (root) ----
if [ "${SANDGATE_SMOKE_PF:-}" = 1 ] && sudo -n true 2>/dev/null; then
  guest="$(id -u nobody)"
  fence() { sudo -n "$bin" firewall "$@" 2>&1; }
  probe="curl -sS --max-time 5 http://127.0.0.1:$port/"
  ctl="$(sudo -n -u nobody $probe 2>&1)"; crc=$?
  fence apply --uid "$guest" --proxy "127.0.0.1:1" >"$dir/pf.log"; arc=$?
  out="$(sudo -n -u nobody $probe 2>&1)"; rc=$?
  if [ $crc -eq 0 ] && [ $arc -eq 0 ] && [ $rc -ne 0 ] && grep -qF "(7)" <<<"$out"; then
    pass pf "guest user: a direct connection is refused (control: before apply it connects)"
  else
    fail pf "guest user: refused (control exit $crc, apply exit $arc, probe exit $rc)" "$(cat "$dir/pf.log")$out"
  fi
  # A main ruleset that passes everything before the anchor: apply must refuse, loudly.
  echo 'pass out quick all' | sudo -n pfctl -q -f - 2>/dev/null
  out="$(fence apply --uid "$guest" --proxy "127.0.0.1:1")"; rc=$?
  sudo -n pfctl -q -f /etc/pf.conf 2>/dev/null
  ctl="$(fence apply --uid "$guest" --proxy "127.0.0.1:1")"; crc=$?
  if [ $rc -ne 0 ] && grep -qF "passes the guest's traffic before the fence" <<<"$out" && [ $crc -eq 0 ]; then
    pass pf "a ruleset that skips the anchor is refused (control: the stock one is accepted)"
  else
    fail pf "a ruleset that skips the anchor is refused (exit $rc, control exit $crc)" "$out$ctl"
  fi
  # An anchor under com.apple/ whose name sorts before the fence's and passes everything.
  echo 'pass out quick all' | sudo -n pfctl -q -a 'com.apple/!early' -f - 2>/dev/null
  out="$(fence apply --uid "$guest" --proxy "127.0.0.1:1")"; rc=$?
  sudo -n pfctl -q -a 'com.apple/!early' -F all 2>/dev/null
  ctl="$(fence apply --uid "$guest" --proxy "127.0.0.1:1")"; crc=$?
  if [ $rc -ne 0 ] && grep -qF '`pass out quick all`' <<<"$out" && [ $crc -eq 0 ]; then
    pass pf "an anchor evaluated before the fence that passes is refused (control: without it)"
  else
    fail pf "an anchor evaluated before the fence is refused (exit $rc, control exit $crc)" "$out$ctl"
  fi
  # set skip on lo0: the guest would reach every loopback service.
  (echo 'set skip on lo0'; cat /etc/pf.conf) | sudo -n pfctl -q -f - 2>/dev/null
  out="$(fence apply --uid "$guest" --proxy "127.0.0.1:1")"; rc=$?
  sudo -n pfctl -q -f /etc/pf.conf 2>/dev/null
  ctl="$(fence apply --uid "$guest" --proxy "127.0.0.1:1")"; crc=$?
  if [ $rc -ne 0 ] && grep -qF "set skip on lo0" <<<"$out" && [ $crc -eq 0 ]; then
    pass pf "set skip on lo0 is refused (control: the stock pf.conf is accepted)"
  else
    fail pf "set skip on lo0 is refused (exit $rc, control exit $crc)" "$out$ctl"
  fi
  # The fence gone after apply: `firewall check` says so (the daemon's periodic check runs the
  # same); control: on the applied fence it exits 0.
  ctl="$(fence check)"; crc=$?
  sudo -n pfctl -q -a "com.apple/0.sandgate.u$guest" -F all 2>/dev/null
  out="$(fence check)"; rc=$?
  if [ $crc -eq 0 ] && [ $rc -ne 0 ] && grep -qF "no block rule" <<<"$out"; then
    pass pf "a flushed fence is reported by firewall check (control: exit 0 before)"
  else
    fail pf "a flushed fence is reported (exit $rc, control exit $crc)" "$out$ctl"
  fi
  fence apply --uid "$guest" --proxy "127.0.0.1:1" >/dev/null
  sudo -n pfctl -q -d 2>/dev/null
  out="$(fence check)"; rc=$?
  sudo -n pfctl -q -e 2>/dev/null
  if [ $rc -ne 0 ] && grep -qF "pf is disabled" <<<"$out"; then
    pass pf "pfctl -d is reported by firewall check"
  else
    fail pf "pfctl -d is reported by firewall check (exit $rc)" "$out"
  fi
  # The boot job: written when this sandgate is root's to change, else apply says why not.
  out="$(fence apply --uid "$guest" --proxy "127.0.0.1:1")"
  plist="/Library/LaunchDaemons/org.sandgate.fence.u$guest.plist"
  if { [ -f "$plist" ] && plutil -lint "$plist" >/dev/null; } || grep -qF "NOT applied again at boot" <<<"$out"; then
    pass pf "apply writes the boot job, or says why it cannot"
  else
    fail pf "apply writes the boot job, or says why it cannot" "$out"
  fi
  fence remove --uid "$guest" >/dev/null
  if [ -e "$plist" ]; then fail pf "remove leaves $plist"; else pass pf "remove takes the boot job away"; fi
else
  echo "SKIP  pf    the pf rows need SANDGATE_SMOKE_PF=1 and sudo without a password"
fi

# Refusals are logged with the sandbox id (what the daemon turns into `blocked` events).
if log show --last 5m --style compact --predicate 'eventMessage CONTAINS "sandgate:"' 2>/dev/null \
  | grep -q "sandgate:sg-"; then
  pass all "refusals are in the log with sandgate:<id>"
else
  fail all "no refusal with sandgate:<id> in \`log show\`"
fi

echo "macos-smoke: $fails failing row(s)"
exit $((fails > 0))
