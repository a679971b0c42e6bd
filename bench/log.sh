#!/usr/bin/env bash
# The traffic log's two figures: `sandgate log --summary` over a store of a million events
# (hyperfine), and how soon `sandgate log --follow` prints a connection after it closed (the
# sandboxed curl prints the time it finished; the follower timestamps each line it reads; same
# clock). Release build; needs hyperfine, python3, curl; run as root (the net tier).
# Usage: bench/log.sh [EVENTS] [CONNECTIONS]   (PROFILE=dev for a debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-1000000}" conns="${2:-30}"
profile="${PROFILE:-release}"
cargo build --profile "$profile" --bin sandgate >/dev/null
bin="$PWD/target/$([ "$profile" = dev ] && echo debug || echo "$profile")/sandgate"
dir="$(mktemp -d /var/tmp/sandgate-logbench.XXXXXX)"
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config" HOME="$dir"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$bin" daemon >"$dir/daemon.log" 2>&1 &
for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && break; sleep 0.05; done

echo "== follow: line printed after the connection closed ($conns connections)"
python3 - "$bin" "$conns" <<'PY'
import http.server, subprocess, sys, threading, time, json, statistics
bin, n = sys.argv[1], int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
follow = subprocess.Popen([bin, "log", "--follow", "--json", "--limit", "0"], stdout=subprocess.PIPE, text=True)
arrivals = []
def read():
    for line in follow.stdout:
        arrivals.append((time.time(), json.loads(line)))
threading.Thread(target=read, daemon=True).start()
time.sleep(1)
lat = []
for _ in range(n):
    before = len(arrivals)
    out = subprocess.run([bin, "net", "-q", f"--allow=127.0.0.1:{port}", "--", "sh", "-c",
                          f"curl -s --noproxy '' -o /dev/null http://127.0.0.1:{port}/; date +%s.%N"],
                         capture_output=True, text=True).stdout
    closed = float(out.split()[-1])
    deadline = time.time() + 5
    while len(arrivals) == before and time.time() < deadline:
        time.sleep(0.001)
    if len(arrivals) > before:
        lat.append((arrivals[before][0] - closed) * 1e3)
follow.kill()
lat.sort()
print(f"lines {len(lat)}/{n}: p50 {statistics.median(lat):.1f} ms, p90 {lat[int(len(lat)*0.9)-1]:.1f} ms, max {lat[-1]:.1f} ms")
PY
"$bin" stop >/dev/null

echo "== summary over $events events"
python3 - "$XDG_DATA_HOME/sandgate/sandgate.db" "$events" <<'PY'
import json, random, sqlite3, sys, time
db, n = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(db)
now = int(time.time() * 1000)
hosts = [f"h{i}.example{i % 50}.com" for i in range(2000)]
def rows():
    for i in range(n):
        if i % 20 == 0:
            yield (now - i, "sg-bench", "blocked_packet", json.dumps({"event": "blocked", "sandbox": "sg-bench", "protocol": "tcp", "dst": "10.0.0.%d" % (i % 200), "port": 443, "count": 1}))
        else:
            h = random.choice(hosts)
            yield (now - i, "sg-bench", "decision", json.dumps({"event": "request", "sandbox": "sg-bench", "method": "CONNECT", "host": h, "port": 443, "decision": "allow" if i % 3 else "deny", "rule": "bench", "bytes_up": 500, "bytes_down": 5000, "ms": 12.5}))
c.executemany("INSERT INTO events (time, sandbox, kind, details) VALUES (?, ?, ?, ?)", rows())
c.commit()
print(c.execute("SELECT count(*) FROM events").fetchone()[0], "events")
PY
hyperfine -N --warmup 1 --runs "${RUNS:-5}" "$bin log --summary" "$bin log --summary --since 1h"
