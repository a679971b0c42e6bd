#!/usr/bin/env bash
# The DNS stub: answers per second and latency (p50/p90/p99) over UDP on 127.0.0.1, for an allowed
# name answered from the stub's cache and for refused names (NXDOMAIN, no lookup), in one run of
# examples/dns_bench.rs. The host's resolver is a fixed in-process answer (not measured).
# Then, as root, the same from inside a `net` sandbox through its own daemon (queries to
# 127.0.0.1:53 of the sandbox, answered by the daemon, events to its store): `localhost` allowed
# (with 127.0.0.1, so the guard lets its answer through; resolved once on the host from
# /etc/hosts, then cached) and random refused names, sequential, one client.
# Usage: bench/dns.sh [SECONDS_PER_PHASE] [--release]   (default 2 s; debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=debug
FLAGS=()
if [ "${2:-}" = --release ]; then PROFILE=release; FLAGS=(--release); fi
export CARGO_INCREMENTAL=0
cargo build "${FLAGS[@]}" -q -p sandgate-proxy --example dns_bench
echo "== $PROFILE build, $(nproc) cores"
"target/$PROFILE/examples/dns_bench" "${1:-2}"

[ "$(id -u)" = 0 ] || { echo "SKIPPED in-sandbox part: needs root"; exit 0; }
cargo build "${FLAGS[@]}" -q -p sandgate --bin sandgate
bin="$PWD/target/$PROFILE/sandgate"
dir="$(mktemp -d /var/tmp/sandgate-dnsbench.XXXXXX)"
export XDG_RUNTIME_DIR="$dir/run" XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config" HOME="$dir"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
echo "== inside a net sandbox, through the daemon"
"$bin" net -q --allow localhost --allow 127.0.0.1 -- python3 - <<'PY'
import random, socket, struct, time
def q(name, i):
    h = struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0)
    return h + b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0' + struct.pack('>HH', 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(('127.0.0.1', 53))
s.settimeout(2)
def run(names):
    lat = []
    t0 = time.perf_counter()
    for i, n in enumerate(names):
        t = time.perf_counter()
        s.send(q(n, i))
        r = s.recv(1500)
        lat.append((time.perf_counter() - t) * 1e6)
    total = time.perf_counter() - t0
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)], len(names) / total, r[3] & 15
n = 3000
run(['localhost'] * 50)
for what, names in [('allowed (cached)', ['localhost'] * n),
                    ('refused (NXDOMAIN)', ['r%d-%d.refused.example' % (random.randrange(1 << 30), i) for i in range(n)])]:
    p50, p99, rate, rcode = run(names)
    print(f'  {what:<20} p50 {p50:7.1f} us  p99 {p99:8.1f} us  {rate:7.0f} answers/s (one client)  rcode {rcode}')
PY
