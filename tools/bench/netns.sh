# Sourced by tools/run-bench.sh: emulated hosts in network namespaces, joined by shaped veth pairs.
#
#   mzb-h  (coordinator)  mzb-h0 10.99.0.1/30 <--veth--> mzb-w0 10.99.0.2/30  mzb-w0 (worker 0)
#                         mzb-h1 10.99.1.1/30 <--veth--> mzb-w1 10.99.1.2/30  mzb-w1 (worker 1)
#
# Each veth end is created directly inside its namespace (`ip link add ... netns`), so no link ever
# exists in the root namespace; the namespaces have no default route and no other interface than
# these and their own loopback, so traffic cannot leave the machine. Both ends of a pair are shaped
# with tbf (token bucket: rate limit only). This kernel has no netem qdisc, so no delay is added:
# the emulated links have the latency of a veth pair (microseconds), not of a real network.
# Needs root. Every name starts with "mzb-"; net_teardown removes exactly these.

NET_NS_HOST=mzb-h
NET_NS_WORKERS=(mzb-w0 mzb-w1)

# net_worker_addr I: the address worker I listens on inside its namespace.
net_worker_addr() { echo "10.99.$1.2"; }

# net_available: 0 when namespaces can be made here (root, ip and tc present), else prints why.
net_available() {
    if [ "$(id -u)" -ne 0 ]; then echo "not root (network namespaces and tc need root)"; return 1; fi
    command -v ip >/dev/null || { echo "ip (iproute2) is not installed"; return 1; }
    command -v tc >/dev/null || { echo "tc (iproute2) is not installed"; return 1; }
    return 0
}

# net_teardown: removes the namespaces (and with them the veth ends inside). Safe to call twice.
net_teardown() {
    local ns
    for ns in "$NET_NS_HOST" "${NET_NS_WORKERS[@]}"; do
        ip netns del "$ns" 2>/dev/null || true
    done
}

# net_setup: creates the namespaces and the two veth pairs (unshaped). Returns 1 on failure.
net_setup() {
    local i ns
    net_teardown  # leftovers of a run that was killed hard
    ip netns add "$NET_NS_HOST" || return 1
    ip -n "$NET_NS_HOST" link set lo up || return 1
    for i in 0 1; do
        ns=${NET_NS_WORKERS[$i]}
        ip netns add "$ns" || return 1
        ip -n "$ns" link set lo up || return 1
        ip link add "mzb-h$i" netns "$NET_NS_HOST" type veth peer name "mzb-w$i" netns "$ns" || return 1
        ip -n "$NET_NS_HOST" addr add "10.99.$i.1/30" dev "mzb-h$i" || return 1
        ip -n "$ns" addr add "10.99.$i.2/30" dev "mzb-w$i" || return 1
        ip -n "$NET_NS_HOST" link set "mzb-h$i" up || return 1
        ip -n "$ns" link set "mzb-w$i" up || return 1
    done
}

# net_shape RATE: RATE is a tc rate ("1gbit", "10gbit"). Token bucket on both ends of both pairs.
# The bucket holds 1 ms of line rate (125 kB at 1 Gbit/s): measured here, a smaller bucket (8 kB,
# 32 kB) holds bulk TCP below the nominal rate (64, 82 MB/s at 1 Gbit/s), 125 kB reaches it (115 MB/s).
# The price: a message smaller than the bucket that follows an idle gap (a decode step's 8-40 kB)
# passes at veth speed, so the serialisation delay of small messages is not emulated. 50 ms of queue.
net_shape() {
    local rate=$1 bits burst i
    case "$rate" in
        *gbit) bits=$(( ${rate%gbit} * 1000000000 )) ;;
        *mbit) bits=$(( ${rate%mbit} * 1000000 )) ;;
        *) echo "net_shape: rate must be Nmbit or Ngbit, got $rate" >&2; return 1 ;;
    esac
    burst=$(( bits / 8 / 1000 ))
    [ "$burst" -lt 16384 ] && burst=16384
    for i in 0 1; do
        tc -n "$NET_NS_HOST" qdisc replace dev "mzb-h$i" root tbf rate "$rate" burst "$burst" latency 50ms || return 1
        tc -n "${NET_NS_WORKERS[$i]}" qdisc replace dev "mzb-w$i" root tbf rate "$rate" burst "$burst" latency 50ms || return 1
    done
}

# net_bytes: "TX RX" bytes summed over the coordinator's veth ends (frames as sent: payload plus
# TCP/IP and Ethernet headers, ACKs and handshakes included).
net_bytes() {
    local tx=0 rx=0 i v
    for i in 0 1; do
        v=$(ip netns exec "$NET_NS_HOST" cat "/sys/class/net/mzb-h$i/statistics/tx_bytes" 2>/dev/null || echo 0)
        tx=$(( tx + v ))
        v=$(ip netns exec "$NET_NS_HOST" cat "/sys/class/net/mzb-h$i/statistics/rx_bytes" 2>/dev/null || echo 0)
        rx=$(( rx + v ))
    done
    echo "$tx $rx"
}
