#!/usr/bin/env bash
# The traffic log's figures:
#  1. `sandgate log --follow`: how soon a connection's line is printed after the origin closed it.
#     A Python origin on 127.0.0.1 stamps the instant it shut each response's connection; one
#     sandbox makes CONNS sequential requests through the proxy (plain HTTP, then CONNECT
#     tunnels); a follower stamps each line as it reads it. Same host, same clock; p50/p99/max.
#  2. The store's event writer (the daemon's batched writer, through the store crate's
#     `events_bench` example): insert rate and CPU per event while it writes EVENTS events.
#  3. `sandgate log --summary` over those EVENTS events (hyperfine), all time and `--since`.
# Needs hyperfine, python3, curl; run as root (the net tier).
# Usage: bench/log.sh [EVENTS] [CONNS]   (PROFILE=dev for a debug build; SPREAD_MS=2592 spreads a
# million events over 30 days instead of 17 minutes; SKIP_FOLLOW=1 / SKIP_SUMMARY=1)
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-1000000}" conns="${2:-100}"
profile="${PROFILE:-release}"
cargo build --profile "$profile" --bin sandgate >/dev/null
cargo build --profile "$profile" -p sandgate-store --example events_bench >/dev/null
out="$PWD/target/$([ "$profile" = dev ] && echo debug || echo "$profile")"
bin="$out/sandgate"
dir="$(mktemp -d /var/tmp/sandgate-logbench.XXXXXX)"
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config" HOME="$dir"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

if [ -z "${SKIP_FOLLOW:-}" ]; then
"$bin" daemon >"$dir/daemon.log" 2>&1 &
for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && break; sleep 0.05; done
echo "== follow: line printed after the origin closed the connection ($conns requests each)"
python3 - "$bin" "$conns" <<'PY'
import http.server, json, socket, statistics, subprocess, sys, threading, time
bin, n = sys.argv[1], int(sys.argv[2])
closed = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"ok")
        self.wfile.flush()
        # The connection ends here (the proxy reads EOF now); stamp it.
        self.connection.shutdown(socket.SHUT_WR)
        closed.append(time.time())
        self.close_connection = True
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
follow = subprocess.Popen([bin, "log", "--follow", "--json", "--limit", "0"],
                          stdout=subprocess.PIPE, text=True, bufsize=1)
lines = []
def read():
    for line in follow.stdout:
        lines.append((time.time(), json.loads(line)))
threading.Thread(target=read, daemon=True).start()
time.sleep(1.5)  # the follower has read the store and subscribed
def pct(xs, p):
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
for mode, flag in [("plain HTTP", ""), ("CONNECT tunnel", "-p")]:
    del closed[:], lines[:]
    script = (f"for i in $(seq {n}); do curl -s {flag} --noproxy '' -o /dev/null "
              f"http://127.0.0.1:{port}/; sleep 0.05; done")
    subprocess.run([bin, "net", "-q", f"--allow=127.0.0.1:{port}", "--", "sh", "-c", script],
                   check=True)
    deadline = time.time() + 5
    while len(lines) < len(closed) and time.time() < deadline:
        time.sleep(0.01)
    got = [t for t, l in lines if l.get("port") == port and l.get("decision") == "allow"]
    if len(got) != len(closed):
        print(f"{mode}: {len(got)} lines for {len(closed)} connections"); continue
    lat = sorted((g - c) * 1e3 for g, c in zip(got, closed))
    print(f"{mode}: {len(lat)} lines, after the origin closed: p50 {statistics.median(lat):.1f} ms, "
          f"p99 {pct(lat, 99):.1f} ms, max {lat[-1]:.1f} ms, min {lat[0]:.1f} ms")
follow.kill()
PY
"$bin" stop >/dev/null
fi

[ -n "${SKIP_SUMMARY:-}" ] && exit 0
echo "== writer and summary over $events events ($profile)"
mkdir -p "$XDG_DATA_HOME/sandgate"
"$out/examples/events_bench" "$XDG_DATA_HOME/sandgate/sandgate.db" "$events" "${SPREAD_MS:-1}"
hyperfine -N --warmup 1 --runs "${RUNS:-10}" "$bin log --summary" "$bin log --summary --since 1h" \
  "$bin log --summary --since 5m --decision deny"
