#!/usr/bin/env bash
# Benchmarks the sandgate proxy on 127.0.0.1 only, side by side with a direct connection and, when
# installed, tinyproxy and squid (Debian packages `tinyproxy`, `squid`), and for (d) nginx as a
# fixed keep-alive relay to the origin (Debian `nginx-light`, installed here when missing):
#   (a) one 1 GiB transfer through a CONNECT tunnel      (target >= 0.9x direct)
#   (b) new connection + CONNECT + small GET, p50/p99     (target <= 60 us added p50)
#   (c) new tunnels per second, 64 concurrent clients     (target >= 0.5x direct)
#   (d) keep-alive requests/s of plain-HTTP forwarding (wrk, 64 connections, 100-byte bodies;
#       median of 5 interleaved rounds of 3 s; target >= 0.9x the nginx relay)
# (a)-(c) come from examples/proxy_bench.rs: every target measured in turn, round after round, so
# load from elsewhere weighs on all alike; (a) median of 5, (b) 3,000 samples from a
# single-threaded client, (c) median of 3 runs of 2 s.
# Usage: bench/proxy.sh            (release build; takes about three minutes)
#        SANDGATE_BASELINE=old/sandgate bench/proxy.sh   (adds an older build as `baseline`)
set -euo pipefail
cd "$(dirname "$0")/.."

# wrk drives (d); nginx is its reference. Installed here, never by CI: a benchmark-only need.
need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || need+=(nginx-light)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
        echo "could not install ${need[*]}: their rows are skipped" >&2
fi

cargo build --release -q -p sandgate --bin sandgate
cargo build --release -q -p sandgate-proxy --example proxy_bench
BIN=target/release
T=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}

"$BIN/examples/proxy_bench" origin "$T/origin.port" & PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/origin.port" ] && break; sleep 0.1; done
ORIGIN=$(cat "$T/origin.port")
PROXIES=()

start_sandgate() { # name mode [binary]
    local port; port=$(free_port)
    XDG_CONFIG_HOME="$T/xdg" RUST_LOG=warn "${3:-$BIN/sandgate}" proxy --listen "127.0.0.1:$port" \
        --allow 127.0.0.1 --tunnel "$2" 2>"$T/$1.log" & PIDS+=($!)
    wait_port "$port"
    PROXIES+=("$1=127.0.0.1:$port")
}
mkdir -p "$T/xdg"
start_sandgate sandgate splice
start_sandgate sandgate-copy copy
# SANDGATE_BASELINE=path/to/an/older/release/sandgate adds it as `baseline`, for before/after
# figures from one run.
if [ -n "${SANDGATE_BASELINE:-}" ]; then
    start_sandgate baseline splice "$SANDGATE_BASELINE"
fi

# The floor: the least any CONNECT proxy costs on this machine (blocking, one connection at a time,
# no checks). A reference for (b) only; serial, so its (c) means nothing.
"$BIN/examples/proxy_bench" floor "$T/floor.port" & PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/floor.port" ] && break; sleep 0.1; done
PROXIES+=("floor=127.0.0.1:$(cat "$T/floor.port")")

# The ceiling for (a): the most any relay moves here with the kernel's TCP (blocking splice(2),
# a thread per direction, no checks). What it loses to direct is what a relay costs this machine.
"$BIN/examples/proxy_bench" splice-floor "$T/splice-floor.port" & PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/splice-floor.port" ] && break; sleep 0.1; done
PROXIES+=("splice-floor=127.0.0.1:$(cat "$T/splice-floor.port")")

if command -v tinyproxy >/dev/null; then
    port=$(free_port)
    cat >"$T/tinyproxy.conf" <<CONF
Port $port
Listen 127.0.0.1
Timeout 600
MaxClients 1024
LogLevel Critical
PidFile "$T/tinyproxy.pid"
Allow 127.0.0.1
CONF
    [ "$(id -u)" = 0 ] && printf 'User nobody\nGroup nogroup\n' >>"$T/tinyproxy.conf"
    tinyproxy -d -c "$T/tinyproxy.conf" >"$T/tinyproxy.log" 2>&1 & PIDS+=($!)
    wait_port "$port" && PROXIES+=("tinyproxy=127.0.0.1:$port")
else
    echo "tinyproxy not installed: skipped" >&2
fi

SQUID=$(command -v squid || true)
if [ -n "$SQUID" ]; then
    port=$(free_port)
    chmod 777 "$T"
    cat >"$T/squid.conf" <<CONF
http_port 127.0.0.1:$port
http_access allow all
cache deny all
access_log none
cache_log $T/squid-cache.log
pid_filename $T/squid.pid
coredump_dir $T
shutdown_lifetime 0 seconds
max_filedescriptors 65536
CONF
    "$SQUID" -N -f "$T/squid.conf" >"$T/squid.log" 2>&1 & PIDS+=($!)
    wait_port "$port" && PROXIES+=("squid=127.0.0.1:$port")
else
    echo "squid not installed: skipped" >&2
fi

# (d)'s reference: nginx as a fixed keep-alive relay to the origin (`proxy_pass` to an upstream
# with a keep-alive pool of 64), no checks. What any HTTP relay costs here; not a CONNECT proxy.
RELAYS=()
if command -v nginx >/dev/null; then
    port=$(free_port)
    mkdir -p "$T/nginx"
    cat >"$T/nginx.conf" <<CONF
daemon off;
worker_processes auto;
pid $T/nginx.pid;
error_log $T/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $T/nginx/body;
    proxy_temp_path $T/nginx/proxy;
    fastcgi_temp_path $T/nginx/fastcgi;
    uwsgi_temp_path $T/nginx/uwsgi;
    scgi_temp_path $T/nginx/scgi;
    upstream origin { server 127.0.0.1:$ORIGIN; keepalive 64; }
    server {
        listen 127.0.0.1:$port;
        keepalive_requests 1000000;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CONF
    nginx -c "$T/nginx.conf" -e "$T/nginx/error.log" >"$T/nginx.log" 2>&1 & PIDS+=($!)
    wait_port "$port" && RELAYS+=("nginx-relay=127.0.0.1:$port")
else
    echo "nginx not installed: (d) has no reference" >&2
fi

echo "== (a)-(c): origin 127.0.0.1:$ORIGIN; 1 GiB transfer, ${#PROXIES[@]} proxies"
"$BIN/examples/proxy_bench" client "127.0.0.1:$ORIGIN" "${PROXIES[@]}"

echo
echo "== (d) keep-alive plain-HTTP forwarding, wrk -t2 -c64 -d3s, median of 5 interleaved rounds"
cat >"$T/proxy.lua" <<LUA
wrk.path = "http://127.0.0.1:$ORIGIN/bytes/100"
wrk.headers["Host"] = "127.0.0.1:$ORIGIN"
LUA
rps() { wrk -t2 -c64 -d3s "$@" 2>/dev/null | awk '/Requests\/sec/ {print $2}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# Every target in turn, round after round (load from elsewhere weighs on all alike); medians.
ROUNDS=5
TARGETS=("direct=" "${RELAYS[@]}")
for p in "${PROXIES[@]}"; do
    name=${p%%=*}
    [ "$name" = sandgate-copy ] && continue # same forwarding path as `sandgate`
    [ "${name%floor}" != "$name" ] && continue # the floors relay CONNECT only
    TARGETS+=("$p")
done
declare -A RUNS
for _ in $(seq 1 $ROUNDS); do
    for p in "${TARGETS[@]}"; do
        name=${p%%=*}; addr=${p#*=}
        if [ -z "$addr" ]; then
            r=$(rps "http://127.0.0.1:$ORIGIN/bytes/100")
        else
            r=$(rps -s "$T/proxy.lua" "http://$addr/")
        fi
        RUNS[$name]="${RUNS[$name]:-} ${r:-0}"
    done
done
# shellcheck disable=SC2086 # word splitting of the runs is the point
direct=$(median ${RUNS[direct]})
nginx_rps=
[ ${#RELAYS[@]} -gt 0 ] && nginx_rps=$(median ${RUNS[nginx-relay]})
for p in "${TARGETS[@]}"; do
    name=${p%%=*}
    # shellcheck disable=SC2086
    r=$(median ${RUNS[$name]})
    printf '%-16s %12s req/s %6.2fx' "$name" "$r" "$(echo "$r / $direct" | bc -l)"
    [ -n "$nginx_rps" ] && [ "$name" != nginx-relay ] && [ "$name" != direct ] &&
        printf '  %5.2fx nginx-relay' "$(echo "$r / $nginx_rps" | bc -l)"
    printf '   (runs:%s)\n' "${RUNS[$name]}"
done
