#!/usr/bin/env bash
# Benchmarks transparent capture (issue 33): a client inside a `sandbox-net` sandbox that knows
# nothing of the proxy, against the same client through the sandbox's CONNECT proxy, in one
# interleaved run; and the same client outside, connecting directly, for reference.
#   (a) one 1 GiB transfer                                  (goal: transparent >= 0.95x CONNECT)
#   (b) new connection + first byte (a small GET), p50/p99   (goal: <= CONNECT's p50 + 20 us)
#   (c) new connections per second, 64 concurrent clients   (goal: no worse than CONNECT)
# The origin is examples/proxy_bench.rs on a test host in a network namespace of this script's,
# on a public-looking address (45.90.0.2) routed only to the script's own veth: nothing leaves the
# machine, and the address guard passes it as any public host (allowed by `--allow 45.90.0.2`).
# The daemon is a private one (its own runtime, config and data directories).
# Usage: bench/transparent.sh      (root; release build; ROUNDS=3 rounds, about ten minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
NS_PREFIX=sgbench HOST=45.90.0.2 BUILD=release
# shellcheck source=bench/lib/net-origin.sh
. bench/lib/net-origin.sh

# Rounds alternate the sandboxed run (transparent and CONNECT, themselves interleaved) with the
# direct run outside, so that load from elsewhere weighs on all three alike; medians per row.
rows() { # the client's table rows as "name GB/s p50 p99 conn/s"
    awk '$1 ~ /^(transparent|connect|direct)$/ {gsub("µs", "", $4); gsub("µs", "", $5); print $1, $2, $4, $5, $8}'
}
: >"$T/rows"
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r/$ROUNDS" >&2
    (cd "$T/work" && "$BIN/sandgate" net -q --allow "$HOST" -- \
        env PROXY_BENCH_DIRECT_NAME=transparent "$BIN/examples/proxy_bench" client "$ORIGIN" \
        connect=127.0.0.1:3128) | rows >>"$T/rows"
    "$BIN/examples/proxy_bench" client "$ORIGIN" | rows >>"$T/rows"
done

python3 - "$T/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *vals = line.split()
    rows.setdefault(name, []).append([float(v) for v in vals])
med = {n: [statistics.median(col) for col in zip(*v)] for n, v in rows.items()}
print(f"medians of {len(rows['direct'])} rounds (transparent and connect: inside sandbox-net; direct: outside)")
print(f"{'':12} {'(a) GB/s':>9} {'x conn':>7} {'x dir':>6} {'(b) p50':>9} {'p99':>8} {'p50-conn':>9} {'(c) conn/s':>10} {'x conn':>7} {'x dir':>6}")
c, d = med['connect'], med['direct']
for n in ('transparent', 'connect', 'direct'):
    g, p50, p99, r = med[n]
    print(f"{n:12} {g:9.2f} {g / c[0]:7.2f} {g / d[0]:6.2f} {p50:7.0f}µs {p99:6.0f}µs {p50 - c[1]:+7.0f}µs {r:10.0f} {r / c[3]:7.2f} {r / d[3]:6.2f}")
PY
