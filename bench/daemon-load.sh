#!/usr/bin/env bash
# Load on one daemon: N sandboxes (`sandgate net`), each with M concurrent CONNECT tunnels through
# its proxy to an echo server on 127.0.0.1, pumping 16 KiB echo round trips for DURATION seconds.
# Samples the daemon's RSS (VmRSS every second, VmHWM at the end) and `status --json`'s active
# connections; prints one summary. Exits non-zero on any error, a launcher that failed, or memory
# that grew (end RSS more than 10% above the sample taken 10 s into the traffic).
#
# Usage: bench/daemon-load.sh [-n N] [-m M] [-d DURATION] [-c CHURN] [SANDGATE_BINARY]
#   N (sandboxes, default 20), M (tunnels per sandbox, default 50), DURATION (seconds, default 60)
#   and CHURN (close each tunnel and open a new one after this many round trips; default 0, never)
#   may also come from the environment. Without a binary, builds target/release/sandgate.
#   Quick smoke run: N=4 M=10 DURATION=10 bench/daemon-load.sh
# Needs root (the net tier), python3. Everything lives in a temp dir under /var/tmp (private
# XDG_{CONFIG,DATA,RUNTIME}_HOME and HOME, so a daemon of its own), removed at exit, also on Ctrl-C.
# Network: only 127.0.0.1.
set -euo pipefail

N="${N:-20}" M="${M:-50}" DURATION="${DURATION:-60}" CHURN="${CHURN:-0}"
while getopts "n:m:d:c:h" opt; do
  case "$opt" in
    n) N="$OPTARG" ;;
    m) M="$OPTARG" ;;
    d) DURATION="$OPTARG" ;;
    c) CHURN="$OPTARG" ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
for v in N M DURATION; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "daemon-load: $v must be a positive integer" >&2; exit 2; }
done
[[ "$CHURN" =~ ^[0-9]+$ ]] || { echo "daemon-load: CHURN must be a number" >&2; exit 2; }
if ((DURATION < 12)); then
  echo "daemon-load: DURATION must be at least 12 s (the memory baseline is taken at 10 s)" >&2
  exit 2
fi

repo="$(cd "$(dirname "$0")/.." && pwd)"
if (($# > 0)); then
  bin="$(realpath "$1")"
else
  (cd "$repo" && cargo build --release --bin sandgate >&2)
  bin="$repo/target/release/sandgate"
fi
[[ -x "$bin" ]] || { echo "daemon-load: $bin is not an executable" >&2; exit 2; }

# The echo server holds N*M sockets and each client M; the daemon raises its own limit.
ulimit -n "$(ulimit -Hn)"
if (($(ulimit -n) < N * M + 256)); then
  echo "daemon-load: RLIMIT_NOFILE $(ulimit -n) is too low for $((N * M)) tunnels" >&2
  exit 2
fi

dir="$(mktemp -d /var/tmp/sandgate-load.XXXXXX)"
mkdir -m 0700 "$dir/config" "$dir/data" "$dir/run" "$dir/home" "$dir/work"
export XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/data" XDG_RUNTIME_DIR="$dir/run"
export HOME="$dir/home"
unset SANDGATE_LOG
cp "$repo/bench/daemon_load_client.py" "$dir/work/client.py"

daemon_pid="" echo_pid="" sampler_pid="" launchers=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  trap '' PIPE # output piped into `head` must not stop the clean-up half way
  for p in "${launchers[@]}" "$sampler_pid" "$echo_pid"; do
    [[ -n "$p" ]] && kill "$p" 2>/dev/null || true
  done
  for p in "${launchers[@]}" "$sampler_pid" "$echo_pid"; do
    [[ -n "$p" ]] && wait "$p" 2>/dev/null || true
  done
  if [[ -n "$daemon_pid" ]]; then
    "$bin" stop >/dev/null 2>&1 || true
    for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if ((rc != 0 && rc < 128)) && [[ -s "$dir/daemon.log" ]]; then
    echo "--- daemon.log (last 20 lines)" >&2
    tail -n 20 "$dir/daemon.log" >&2
  fi
  # Retried: a sandbox's placeholder cleaner may still be removing its files in the work dir.
  for _ in 1 2 3 4 5 6; do
    rm -rf "$dir" 2>/dev/null && break
    sleep 0.5
  done
  [[ ! -e "$dir" ]] || echo "daemon-load: could not remove $dir" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rss() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
active() {
  local n
  n="$("$bin" status --json 2>/dev/null | sed -n 's/^ *"active_connections": *\([0-9]*\).*/\1/p')"
  echo "${n:-?}"
}
cpu_s() { awk '{ printf "%.1f", ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null || echo "?"; }

# Echo server.
python3 "$dir/work/client.py" echo "$dir/echo.port" 2>"$dir/echo.err" &
echo_pid=$!
for _ in $(seq 100); do [[ -s "$dir/echo.port" ]] && break; sleep 0.05; done
[[ -s "$dir/echo.port" ]] || { echo "daemon-load: the echo server did not start" >&2; cat "$dir/echo.err" >&2; exit 1; }
port="$(cat "$dir/echo.port")"

# One daemon, in the foreground of its own job (not detached, so this script can wait for it).
"$bin" daemon >"$dir/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do "$bin" status --json >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" status --json >/dev/null 2>&1 || { echo "daemon-load: the daemon did not start" >&2; exit 1; }
rss_idle="$(rss "$daemon_pid" VmRSS)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# The sandboxes. Their cwd (the work dir) is visible inside; /tmp is not.
t_launch="$(date +%s.%N)"
for i in $(seq "$N"); do
  (cd "$dir/work" && exec "$bin" net --allow=127.0.0.1 -- \
    python3 client.py client "$port" "$M" "$dir/work/go" "$CHURN") \
    </dev/null >"$dir/out.$i" 2>"$dir/err.$i" &
  launchers+=($!)
done
opened=0
deadline=$((SECONDS + 60 + N * M / 20))
while ((SECONDS < deadline)); do
  opened=0
  for i in $(seq "$N"); do
    grep -q "^open $M\$" "$dir/out.$i" 2>/dev/null && opened=$((opened + 1))
  done
  ((opened == N)) && break
  for i in $(seq "$N"); do
    # Read once: the client may write its line between two looks.
    alive=yes
    kill -0 "${launchers[i - 1]}" 2>/dev/null || alive=no
    out="$(cat "$dir/out.$i" 2>/dev/null; echo .)"
    out="${out%.}"
    grep -q "^open $M\$" <<<"$out" && continue
    if [[ "$out" == "open "*$'\n' || "$alive" == no ]]; then
      echo "daemon-load: sandbox $i could not open its $M tunnels:" >&2
      cat "$dir/out.$i" "$dir/err.$i" >&2
      exit 1
    fi
  done
  sleep 0.2
done
((opened == N)) || { echo "daemon-load: only $opened of $N sandboxes opened their tunnels in time" >&2; exit 1; }
t_open="$(date +%s.%N)"
rss_open="$(rss "$daemon_pid" VmRSS)"
active_open="$(active)"

# Traffic: every client pumps until the end time written in the go file.
start="$(date +%s.%N)"
end="$(python3 -c "print(f'{$start + $DURATION:.3f}')")"
echo "$end" >"$dir/work/go.tmp" && mv "$dir/work/go.tmp" "$dir/work/go"
cpu_start="$(cpu_s "$daemon_pid")"
(
  while :; do
    echo "$(date +%s.%N) $(rss "$daemon_pid" VmRSS) $(active)"
    sleep 1
  done
) >"$dir/samples" &
sampler_pid=$!
sleep 10
rss_10="$(rss "$daemon_pid" VmRSS)"
python3 -c "import time; time.sleep(max(0.0, $end - 1.0 - time.time()))"
rss_end="$(rss "$daemon_pid" VmRSS)"
cpu_end="$(cpu_s "$daemon_pid")"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

failed=0
for i in $(seq "$N"); do
  rc=0
  wait "${launchers[i - 1]}" || rc=$?
  if ((rc != 0)); then
    failed=$((failed + 1))
    echo "daemon-load: sandbox $i exited $rc:" >&2
    cat "$dir/err.$i" >&2
  fi
done
launchers=()
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=""
alive=yes
kill -0 "$daemon_pid" 2>/dev/null || alive=no
hwm="$(rss "$daemon_pid" VmHWM)"
"$bin" status --json >"$dir/status.json" 2>/dev/null || true
rss_after="$(rss "$daemon_pid" VmRSS)"

python3 - "$dir" "$N" "$M" "$DURATION" "$failed" "$alive" "$CHURN" <<EOF
import json, sys
d, n, m, duration, failed, alive = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
churn = int(sys.argv[7])
rt = by = errors = reconnects = reopened = 0
first = []
for i in range(1, n + 1):
    lines = [l for l in open("%s/out.%d" % (d, i)).read().splitlines() if l.startswith("{")]
    if not lines:
        errors += 1
        first.append("sandbox %d: no result" % i)
        continue
    r = json.loads(lines[-1])
    rt += r["round_trips"]; by += r["bytes"]; errors += r["errors"]; reconnects += r["reconnects"]; reopened += r["reopened"]
    if r["first_error"]:
        first.append("sandbox %d: %s" % (i, r["first_error"]))
# Samples taken while every client was still pumping (up to a second before the end time).
samples = [l.split() for l in open(d + "/samples").read().splitlines()]
samples = [s for s in samples if len(s) == 3 and float(s[0]) < $end - 1.0]
act = [int(s[2]) for s in samples if s[2].isdigit()]
rss = [int(s[1]) for s in samples if s[1].isdigit()]
rss_idle, rss_open, rss_10, rss_end, hwm = (int(x) for x in "$rss_idle $rss_open $rss_10 $rss_end $hwm".split())
rss_after = int("${rss_after:-0}" or 0)
flat = rss_end <= rss_10 * 1.10
mib = lambda k: "%.1f MiB" % (k / 1024)
print("sandgate daemon under load")
print("  sandboxes            %d (launched and all tunnels open in %.1f s)" % (n, $t_open - $t_launch))
print("  tunnels              %d (%d per sandbox), 16 KiB echo round trips" % (n * m, m))
if churn:
    print("  churn                a new tunnel every %d round trips: %d opened during the run" % (churn, reopened))
print("  duration             %d s" % duration)
print("  round trips          %d (%.0f/s)" % (rt, rt / duration))
print("  moved                %.1f MB through the proxy each way (%.1f MB/s)" % (by / 2 / 1e6, by / 2 / 1e6 / duration))
print("  errors               %d (reconnects %d, failed launchers %d, daemon alive at end: %s)" % (errors, reconnects, failed, alive))
for f in first[:5]:
    print("    " + f)
try:
    ev = json.load(open(d + "/status.json"))["events"]
    print("  store events         written %s, dropped %s, failed %s" % (ev["written"], ev["dropped"], ev["failed"]))
except (OSError, ValueError, KeyError) as e:
    print("  store events         ? (%s)" % e)
print("  active connections   %s after open, %s..%s while pumping (status --json, %d samples)" % ("$active_open", min(act) if act else "?", max(act) if act else "?", len(act)))
print("  daemon RSS           idle %s, tunnels open %s, +10 s %s, end %s, max of samples %s" % (mib(rss_idle), mib(rss_open), mib(rss_10), mib(rss_end), mib(max(rss)) if rss else "?"))
print("                       after the sandboxes exited %s" % mib(rss_after))
if samples:
    t0 = float(samples[0][0])
    marks, nxt = [], 0.0
    for s in samples:
        if float(s[0]) - t0 >= nxt and s[1].isdigit():
            marks.append("%.1f" % (int(s[1]) / 1024))
            nxt += 10.0
    print("  RSS every 10 s (MiB) " + " ".join(marks))
print("  daemon peak (VmHWM)  %s" % mib(hwm))
print("  memory flat          %s (end %+.1f%% vs +10 s; limit +10%%)" % ("yes" if flat else "NO", (rss_end / rss_10 - 1) * 100))
print("  daemon CPU           %.1f s user+sys over the %d s of traffic" % ($cpu_end - $cpu_start, duration))
print("  load average         before %s, end %s (%s cores)" % ("$load_before", "$load_after", "$(nproc)"))
sys.exit(0 if errors == 0 and failed == 0 and flat and alive == "yes" else 1)
EOF
