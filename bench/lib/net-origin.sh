# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables set here are the sourcing script's
# The common start of the scripts that measure a client inside `sandbox-net` against an origin on
# a test host (bench/attribution.sh, bench/telemetry.sh). Sourced after `cd` to the checkout, with
# NS_PREFIX (the namespace's name, before the script's pid) and HOST (the test host) set. It
# builds sandgate and the proxy_bench example (BUILD=release by default), makes the test host in a
# namespace of the script's (routed only to its own veth) with the origin on it, and a private
# daemon's directories; it sets BIN, ROUNDS, KIND, T, NS, HOST, PIDS and ORIGIN, and the cleanup
# on exit (which stops only the private daemon).
# shellcheck source=bench/lib/test-host.sh
. bench/lib/test-host.sh
[ "$(id -u)" = 0 ] || { echo "run as root (it makes a network namespace)" >&2; exit 1; }

BUILD=${BUILD:-release}
if [ "$BUILD" = release ]; then
    cargo build --release -q -p sandgate --bin sandgate
    cargo build --release -q -p sandgate-proxy --example proxy_bench
else
    cargo build -q -p sandgate --bin sandgate
    cargo build -q -p sandgate-proxy --example proxy_bench
fi
BIN=$PWD/target/$BUILD
ROUNDS=${ROUNDS:-3}
KIND=${KIND:-rate}
T=$(mktemp -d)
NS=$NS_PREFIX$$
: "${HOST:?set HOST, the test host address, before sourcing}"
PIDS=()
cleanup() {
    XDG_RUNTIME_DIR="$T/run" XDG_CONFIG_HOME="$T/config" XDG_DATA_HOME="$T/data" \
        "$BIN/sandgate" stop >/dev/null 2>&1 || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    remove_test_host "$NS"
    rm -rf "$T"
}
trap cleanup EXIT

test_host "$NS" "$HOST" "${HOST%.*}.1"

ip netns exec "$NS" env PROXY_BENCH_BIND="$HOST:0" "$BIN/examples/proxy_bench" origin "$T/origin.port" &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/origin.port" ] && break; sleep 0.1; done
ORIGIN="$HOST:$(cat "$T/origin.port")"

mkdir -p "$T/run" "$T/config" "$T/data" "$T/work"
chmod 700 "$T/run"
export XDG_RUNTIME_DIR="$T/run" XDG_CONFIG_HOME="$T/config" XDG_DATA_HOME="$T/data"
