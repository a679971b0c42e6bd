# shellcheck shell=bash
# Shared by the benches that need a test host on a public-looking address (sourced, not run):
# a network namespace NS with one veth, its end `eth0` holding HOST/32, the host's end `vNS`
# holding GATEWAY/32, and a route for HOST/32 only through it: nothing sent to HOST leaves the
# machine, and the address guard passes HOST like any public address. Each bench has its own
# addresses, so that two can run at once.

# test_host NS HOST GATEWAY
test_host() {
    local ns=$1 host=$2 gateway=$3
    ip netns add "$ns"
    ip link add "v$ns" type veth peer name eth0 netns "$ns"
    ip addr add "$gateway/32" dev "v$ns"
    ip link set "v$ns" up
    ip route add "$host/32" dev "v$ns"
    ip -n "$ns" addr add "$host/32" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add "$gateway/32" dev eth0
}

# remove_test_host NS
remove_test_host() {
    ip netns del "$1" 2>/dev/null || true
    ip link del "v$1" 2>/dev/null || true
}
