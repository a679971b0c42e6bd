#!/usr/bin/env bash
# Real clients inside a `sandbox-net` sandbox (issue 33): the wall time of one command (a process
# started, one name looked up, one connection, one small answer) through the proxy variables the
# launcher sets, against the same command with every proxy setting unset (transparent capture),
# interleaved in one run; median and p90 per client, and the ratio of the medians.
#   curl over HTTP and HTTPS, Python's urllib, a Go program (Proxy: ProxyFromEnvironment against
#   Proxy: nil, built here if `go` is installed), Java's HttpClient (`java Main.java`: through
#   JAVA_TOOL_OPTIONS against without it, if `javac` is installed; fewer runs, it takes seconds).
# The origin is on a test host in a network namespace of this script's, on a public-looking
# address (45.90.8.2) routed only to the script's own veth (nothing leaves the machine); its name
# `origin.bench` resolves there through a DNS server of the script on 127.0.0.1
# (SANDGATE_DNS_SERVER), and only the name is allowed. The daemon is a private one.
# Its addresses are its own (not bench/transparent.sh's nor the suite's): they can run at once.
# Usage: bench/transparent-clients.sh [RUNS] [--release]   (root; default 30 runs; debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib/test-host.sh
. bench/lib/test-host.sh
[ "$(id -u)" = 0 ] || { echo "run as root (it makes a network namespace)" >&2; exit 1; }
RUNS=${1:-30}
PROFILE=debug
FLAGS=()
if [ "${2:-}" = --release ]; then PROFILE=release; FLAGS=(--release); fi
cargo build "${FLAGS[@]}" -q -p sandgate --bin sandgate
BIN=$PWD/target/$PROFILE/sandgate
T=$(mktemp -d /var/tmp/sandgate-clientbench.XXXXXX)
chmod 755 "$T"
NS=sgcb$$
HOST=45.90.8.2
PIDS=()
cleanup() {
    XDG_RUNTIME_DIR="$T/run" XDG_CONFIG_HOME="$T/config" XDG_DATA_HOME="$T/data" \
        "$BIN" stop >/dev/null 2>&1 || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    remove_test_host "$NS"
    rm -rf "$T"
}
trap cleanup EXIT

test_host "$NS" "$HOST" 45.90.8.1

mkdir -p "$T/run" "$T/config/sandgate" "$T/data" "$T/work" "$T/www"
chmod 700 "$T/run"
echo "hello" >"$T/www/index.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=origin.bench \
    -addext subjectAltName=DNS:origin.bench -keyout "$T/key.pem" -out "$T/work/cert.pem" 2>/dev/null
ip netns exec "$NS" python3 -m http.server 8080 --bind "$HOST" --directory "$T/www" \
    >/dev/null 2>&1 &
PIDS+=($!)
ip netns exec "$NS" openssl s_server -quiet -www -accept "$HOST:8443" -cert "$T/work/cert.pem" \
    -key "$T/key.pem" >/dev/null 2>&1 &
PIDS+=($!)

# The host's resolver for the daemon: origin.bench is 45.90.8.2, everything else NXDOMAIN.
python3 - "$T/dns.port" <<'PY' &
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
while True:
    d, a = s.recvfrom(2048)
    i, labels = 12, []
    while d[i]:
        labels.append(d[i + 1:i + 1 + d[i]].decode(errors="replace").lower())
        i += 1 + d[i]
    q, qtype = d[12:i + 5], struct.unpack(">H", d[i + 1:i + 3])[0]
    if ".".join(labels) != "origin.bench":
        s.sendto(d[:2] + struct.pack(">HHHHH", 0x8183, 1, 0, 0, 0) + q, a)
    elif qtype == 1:
        rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton("45.90.8.2")
        s.sendto(d[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0) + q + rr, a)
    else:
        s.sendto(d[:2] + struct.pack(">HHHHH", 0x8180, 1, 0, 0, 0) + q, a)
PY
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/dns.port" ] && curl -s -o /dev/null "http://$HOST:8080/" && break; sleep 0.1; done
SANDGATE_DNS_SERVER="127.0.0.1:$(cat "$T/dns.port")"
export SANDGATE_DNS_SERVER

if command -v go >/dev/null; then
    mkdir -p "$T/go"
    cat >"$T/go/main.go" <<'GO'
package main

import (
	"io"
	"net/http"
	"os"
)

func main() {
	t := &http.Transport{Proxy: nil}
	if os.Getenv("USE_ENV_PROXY") != "" {
		t.Proxy = http.ProxyFromEnvironment
	}
	resp, err := (&http.Client{Transport: t}).Get(os.Args[1])
	if err != nil || resp.StatusCode != 200 {
		os.Exit(1)
	}
	io.ReadAll(resp.Body)
}
GO
    printf 'module bench\n\ngo 1.19\n' >"$T/go/go.mod"
    (cd "$T/go" && GOCACHE="$T/go/cache" GOPATH="$T/go/path" GOFLAGS=-mod=mod GOPROXY=off \
        CGO_ENABLED=0 go build -o "$T/work/goclient" .)
fi
if command -v javac >/dev/null; then
    cat >"$T/work/Main.java" <<'JAVA'
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Main {
    public static void main(String[] args) throws Exception {
        HttpResponse<String> r = HttpClient.newHttpClient().send(
            HttpRequest.newBuilder(URI.create(args[0])).build(), HttpResponse.BodyHandlers.ofString());
        System.exit(r.statusCode() == 200 ? 0 : 1);
    }
}
JAVA
fi

export XDG_RUNTIME_DIR="$T/run" XDG_CONFIG_HOME="$T/config" XDG_DATA_HOME="$T/data"
echo "== $PROFILE build, $(nproc) cores, $RUNS runs per client and path (Java: a fifth)"
cd "$T/work"
"$BIN" net -q --allow origin.bench -- /usr/bin/python3 - "$RUNS" <<'PY'
import os, shutil, statistics, subprocess, sys, time
runs = int(sys.argv[1])
proxy_env = dict(os.environ)
bare = {k: v for k, v in os.environ.items()
        if "proxy" not in k.lower() and k not in ("JAVA_TOOL_OPTIONS", "GIT_SSH_COMMAND")
        and not k.startswith("GIT_CONFIG_")}
http, https = "http://origin.bench:8080/", "https://origin.bench:8443/"
py = "import urllib.request as u; u.urlopen('%s').read()" % http
clients = [
    ("curl http", ["curl", "-sf", "-o", "/dev/null", http], {},
     ["curl", "-sf", "--noproxy", "*", "-o", "/dev/null", http], {}, runs),
    ("curl https", ["curl", "-sf", "--cacert", "cert.pem", "-o", "/dev/null", https], {},
     ["curl", "-sf", "--noproxy", "*", "--cacert", "cert.pem", "-o", "/dev/null", https], {}, runs),
    ("python urllib", ["/usr/bin/python3", "-c", py], {},
     ["/usr/bin/python3", "-c", py], {"no_proxy": "*"}, runs),
]
if os.path.exists("goclient"):
    clients.append(("go net/http", ["./goclient", http], {"USE_ENV_PROXY": "1"},
                    ["./goclient", http], {}, runs))
if os.path.exists("Main.java") and shutil.which("java"):
    clients.append(("java HttpClient", ["java", "Main.java", http], {},
                    ["java", "Main.java", http], {}, max(3, runs // 5)))

def once(argv, env):
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"{argv}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    return (time.perf_counter() - t) * 1000

print(f"{'client':<16} {'proxy vars p50/p90 ms':>22} {'transparent p50/p90 ms':>24} {'ratio':>6}")
for label, pargv, penv, targv, tenv, n in clients:
    p, t = [], []
    # Interleaved, after one warm-up of each (page cache, the daemon's first lookup).
    once(pargv, {**proxy_env, **penv}); once(targv, {**bare, **tenv})
    for _ in range(n):
        p.append(once(pargv, {**proxy_env, **penv}))
        t.append(once(targv, {**bare, **tenv}))
    q = lambda xs: (statistics.median(xs), statistics.quantiles(xs, n=10)[-1])
    (p50, p90), (t50, t90) = q(p), q(t)
    print(f"{label:<16} {p50:>12.1f} / {p90:<8.1f} {t50:>14.1f} / {t90:<8.1f} {t50 / p50:>5.2f}x")
PY
echo
echo "== the events of the run, by method"
"$BIN" log --json | python3 -c '
import collections, json, sys
c = collections.Counter((e["method"], e["decision"]) for e in map(json.loads, sys.stdin))
for (m, d), n in sorted(c.items()): print(f"  {m:<8} {d:<6} {n}")'
