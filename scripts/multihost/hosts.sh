#!/usr/bin/env bash
# Several emulated hosts on one machine (root, Linux): network namespaces sr-h1..sr-hN, each with
# its own hostname (a persistent UTS namespace) and one veth (eth0, 10.213.0.K/24) joined to a
# bridge that lives in a namespace of its own (sr-br), never in the root namespace. Open MPI sees
# distinct hostnames, so it treats them as distinct nodes (TCP between them, no shared memory).
#   hosts.sh up N                 build N hosts (tears down any earlier ones first)
#   hosts.sh down                 stop every process in them and remove them (idempotent)
#   hosts.sh exec HOST CMD...     run CMD on HOST (sr-hK, K or 10.213.0.K)
#   hosts.sh link HOST up|down    take HOST's link down (a cable pulled) or up again
#   hosts.sh pids HOST            the pids of the processes on HOST
#   hosts.sh hostfile SLOTS       an Open MPI hostfile of every host, SLOTS slots each
#   hosts.sh check                exit 0 when namespaces can be made here, else say why (exit 77)
# Environment: SR_HOSTS_SUBNET (default 10.213.0; a /24 this script alone uses);
#   SR_HOSTS_TCP_RETRIES2: net.ipv4.tcp_retries2 inside every host (default: the kernel's, 15).
#   A host cut off leaves mpirun's last message to its daemon unacknowledged, and TCP gives that
#   up only after tcp_retries2 retransmissions (15: about 15 min; 5: 12.6 s), so until then mpirun
#   waits for the daemon. Keepalives (oob_tcp_keepalive_*) do not run while data is unacknowledged.
set -euo pipefail

subnet=${SR_HOSTS_SUBNET:-10.213.0}
state=/run/shardrec-hosts  # the UTS namespace files and the host count
bridge_ns=sr-br

die() {
    echo "hosts.sh: $*" >&2
    exit 1
}

host_index() {  # sr-hK, K or SUBNET.K -> K
    local h=$1
    case $h in
        sr-h[0-9]*) h=${h#sr-h} ;;
        "$subnet".*) h=${h##*.} ;;
    esac
    [[ $h =~ ^[0-9]+$ ]] && [ -e "$state/sr-h$h.uts" ] || die "no host '$1' (hosts.sh up N first)"
    echo "$h"
}

check() {
    local why=""
    if [ "$(id -u)" != 0 ]; then
        why="not root"
    elif ! command -v ip >/dev/null || ! command -v nsenter >/dev/null ||
        ! command -v unshare >/dev/null; then
        why="ip, nsenter or unshare is missing"
    elif ! ip netns add sr-probe 2>/dev/null; then
        why="ip netns add fails (no permission for network namespaces)"
    else
        ip netns del sr-probe
    fi
    if [ -n "$why" ]; then
        echo "hosts.sh: cannot make network namespaces: $why" >&2
        return 77
    fi
}

# Every process in one of our namespaces, TERM then KILL: the hosts' processes only.
stop_pids() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    kill -TERM $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -z "$pids" ] && return 0
        sleep 0.2
    done
    kill -KILL $pids 2>/dev/null || true
}

down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^sr-(h[0-9]+|br)$' || true); do
        stop_pids "$ns"
        ip netns del "$ns" 2>/dev/null || true
    done
    if [ -d "$state" ]; then
        for f in "$state"/*.uts; do
            [ -e "$f" ] || continue
            umount "$f" 2>/dev/null || true
        done
        rm -rf "$state"
    fi
}

up() {
    local n=$1 k
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up N: N must be 1..200"
    check || exit 77
    down
    mkdir -p "$state"
    ip netns add "$bridge_ns"
    ip -n "$bridge_ns" link add br0 type bridge
    ip -n "$bridge_ns" link set br0 up
    for k in $(seq 1 "$n"); do
        ip netns add "sr-h$k"
        ip -n "sr-h$k" link set lo up
        if [ -n "${SR_HOSTS_TCP_RETRIES2:-}" ]; then
            ip netns exec "sr-h$k" sysctl -q -w net.ipv4.tcp_retries2="$SR_HOSTS_TCP_RETRIES2"
        fi
        ip link add "sr-h$k-p" netns "$bridge_ns" type veth peer name eth0 netns "sr-h$k"
        ip -n "$bridge_ns" link set "sr-h$k-p" master br0 up
        ip -n "sr-h$k" addr add "$subnet.$k/24" dev eth0
        ip -n "sr-h$k" link set eth0 up
        touch "$state/sr-h$k.uts"
        unshare --uts="$state/sr-h$k.uts" hostname "sr-h$k"
    done
    echo "$n" >"$state/count"
}

exec_on() {
    local k
    k=$(host_index "$1")
    shift
    exec nsenter --net="/run/netns/sr-h$k" --uts="$state/sr-h$k.uts" -- "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    up) up "${1:?up N}" ;;
    down) down ;;
    check) check ;;
    exec)
        [ $# -ge 2 ] || die "exec HOST CMD..."
        exec_on "$@"
        ;;
    link)
        k=$(host_index "${1:?link HOST up|down}")
        case ${2:-} in up | down) ip -n "sr-h$k" link set eth0 "$2" ;; *) die "link HOST up|down" ;; esac
        ;;
    pids) ip netns pids "sr-h$(host_index "${1:?pids HOST}")" ;;
    hostfile)
        [ -e "$state/count" ] || die "no hosts (hosts.sh up N first)"
        for k in $(seq 1 "$(cat "$state/count")"); do
            echo "sr-h$k slots=${1:?hostfile SLOTS}"
        done
        ;;
    *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
