#!/usr/bin/env bash
# up.sh [N]: start a local test cluster of N hosts (default 2), as root.
#
# Each host nodeI is a network namespace hpct-nodeI with one veth (eth0,
# 10.77.0.(10+I)/24) plugged into a bridge br0 that lives in its own namespace
# hpct-hub; the root namespace's networking is left alone. Name resolution:
# /etc/netns/hpct-nodeI/hosts (which `ip netns exec` mounts over /etc/hosts)
# maps node1..N to their addresses. Hostnames come from a UTS namespace made
# per command by rsh-agent.sh and mpirun.sh (`unshare --uts`), so nothing here
# changes the machine's hostname. Each host's TCP gives up on a peer that
# stopped answering after ~25 s (net.ipv4.tcp_retries2 6 in its namespace),
# so that a job with a host gone ends soon after its watchdog, not in ~15 min.
#
# Any cluster of the same name is torn down first (down.sh), so up.sh also
# recovers from a run that was killed before its tear-down.
# Exit status 2: a bad N (nothing is touched); 1: anything else failed.
# Environment: HPCT_CLUSTER (default hpct) prefixes namespaces and state dir.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"

die() { echo "cluster up.sh: $*" >&2; exit 1; }
bad() { echo "cluster up.sh: $*" >&2; exit 2; }
[ $# -le 1 ] || bad "usage: up.sh [N]   (N hosts, 1..200)"
n=${1:-2}
case "$n" in '' | *[!0-9]*) bad "usage: up.sh [N]   (N hosts, 1..200)" ;; esac
{ [ "$n" -ge 1 ] && [ "$n" -le 200 ]; } || bad "N must be 1..200, not $n"
[ "$(id -u)" -eq 0 ] || die "must run as root (creates network namespaces)"

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
	echo "cluster up.sh: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2 || die "apt-get update failed"
	apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 || die "apt-get install ${need[*]} failed"
fi

"$here/down.sh" >/dev/null

# If anything below fails, leave nothing half-built behind; nor when up.sh
# is stopped (Ctrl-C, timeout(1)): bash runs no EXIT trap for a signal that
# kills it, so each one exits through it.
undo() {
	local rc=$?
	[ "$rc" -eq 0 ] && return
	trap '' INT TERM HUP # the tear-down itself is not to be cut short
	echo "cluster up.sh: failed, tearing down" >&2
	"$here/down.sh" >&2 || true
}
trap undo EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$STATE"
{
	echo "127.0.0.1	localhost"
	echo "::1	localhost ip6-localhost ip6-loopback"
	for i in $(seq "$n"); do echo "$(node_ip "$i")	node$i"; done
} >"$STATE/hosts"

ip netns add "$HUB"
ip -n "$HUB" link set lo up
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" link set br0 up
for i in $(seq "$n"); do
	ns=$(node_ns "$i")
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	# A host that goes away (its link down) leaves TCP data unacknowledged;
	# Linux retransmits it for ~15 min (tcp_retries2 15) before the socket
	# fails, and until then mpirun, aborting the job, waits for that host's
	# orted. 6 gives up after ~25 s. Per namespace: the machine's is untouched.
	ip netns exec "$ns" sh -c "echo 6 >/proc/sys/net/ipv4/tcp_retries2"
	ip -n "$HUB" link add "vnode$i" type veth peer name eth0 netns "$ns"
	ip -n "$HUB" link set "vnode$i" master br0 up
	ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
	ip -n "$ns" link set eth0 up
	mkdir -p "/etc/netns/$ns"
	cp "$STATE/hosts" "/etc/netns/$ns/hosts"
done

# Wait until every eth0 has carrier (veth is up at both ends).
for i in $(seq "$n"); do
	ns=$(node_ns "$i")
	for _ in $(seq 100); do
		ip -n "$ns" link show eth0 | grep -q LOWER_UP && break
		sleep 0.05
	done
	ip -n "$ns" link show eth0 | grep -q LOWER_UP || die "$ns: eth0 has no carrier"
done
echo "$n" >"$STATE/nodes"
trap - EXIT HUP INT TERM

hosts=$(seq -f 'node%g:2' 1 "$n" | paste -sd,)
# The commands below name this cluster when it is not the default: the bare
# scripts act on hpct (down.sh would take down another's cluster).
s=$here
[ "$HPCT_CLUSTER" = hpct ] || s="HPCT_CLUSTER=$HPCT_CLUSTER $here"
cat <<USAGE
cluster up: $n host$([ "$n" -eq 1 ] || echo s) ($(for i in $(seq "$n"); do printf 'node%d=%s ' "$i" "$(node_ip "$i")"; done | sed 's/ $//'))
  run:    $s/mpirun.sh -np $((2 * n)) --host $hosts PROGRAM ARGS...
  shell:  $s/rsh-agent.sh node1 'hostname; ip -br addr'
  links:  $s/netem.sh on 5ms 1%   |   $s/netem.sh off
  stop:   $s/down.sh
USAGE
