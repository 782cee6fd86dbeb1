#!/usr/bin/env bash
# netem.sh: degrade the links of the local test cluster (up.sh), as root.
#
#   netem.sh on DELAY [LOSS]  tc netem on every node's eth0 (egress): each
#                             packet between hosts is delayed DELAY (so a round
#                             trip takes 2*DELAY) and lost with LOSS, e.g.
#                             `netem.sh on 5ms 1%`
#   netem.sh drop LOSS        no netem needed: nftables drops LOSS of the
#                             packets arriving on every node's eth0 (random,
#                             like a lossy wire; no delay). Installs nftables
#                             if `nft` is missing.
#   netem.sh off              undo both (idempotent)
#   netem.sh check            exit 0 if the kernel has netem, 3 if not
#
# Exit status 3: the kernel lacks what the mode needs (sch_netem for on and
# check, nf_tables for drop); nothing was changed. Tests skip on 3.
# Environment: HPCT_CLUSTER, as for up.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"
die() { echo "cluster netem.sh: $*" >&2; exit 1; }
unsupported() { echo "cluster netem.sh: $*" >&2; exit 3; }
usage="usage: netem.sh on DELAY [LOSS] | drop LOSS | off | check"
[ "$(id -u)" -eq 0 ] || die "must run as root"
[ -s "$STATE/nodes" ] || die "no cluster: run $here/up.sh first"
n=$(cat "$STATE/nodes")
command -v tc >/dev/null 2>&1 || die "tc missing (package iproute2)"

# have_netem: can a netem qdisc be made here? Tried on the hub's loopback,
# which carries no cluster traffic, after loading sch_netem if we can.
have_netem() {
	if ip netns exec "$HUB" tc qdisc add dev lo root netem delay 0ms 2>/dev/null; then
		ip netns exec "$HUB" tc qdisc del dev lo root 2>/dev/null || true
		return 0
	fi
	command -v modprobe >/dev/null 2>&1 && modprobe sch_netem 2>/dev/null || return 1
	ip netns exec "$HUB" tc qdisc add dev lo root netem delay 0ms 2>/dev/null || return 1
	ip netns exec "$HUB" tc qdisc del dev lo root 2>/dev/null || true
}
why_not="this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM unset and sch_netem not loadable); 'netem.sh drop LOSS' needs only nf_tables"

# per10000 1% -> 100, 0.5% -> 50, 2 -> 200.
per10000() {
	awk -v s="$1" 'BEGIN { sub(/%$/, "", s); if (s !~ /^[0-9]+(\.[0-9]+)?$/ || s + 0 > 100) exit 1; printf "%d\n", s * 100 + 0.5 }' ||
		die "bad loss '$1' (want a percentage such as 1% or 0.5%)"
}

table=hpct_loss
case "${1:-}" in
check)
	have_netem || unsupported "$why_not"
	echo "cluster netem.sh: netem supported"
	;;
on)
	{ [ $# -ge 2 ] && [ $# -le 3 ]; } || die "$usage"
	have_netem || unsupported "$why_not"
	spec=(delay "$2")
	[ $# -lt 3 ] || spec+=(loss "$3")
	for i in $(seq "$n"); do
		ip netns exec "$(node_ns "$i")" tc qdisc replace dev eth0 root netem "${spec[@]}" ||
			die "tc netem ${spec[*]} on node$i failed"
	done
	echo "cluster netem.sh: netem ${spec[*]} on eth0 of node1..node$n"
	;;
drop)
	[ $# -eq 2 ] || die "$usage"
	p=$(per10000 "$2")
	if ! command -v nft >/dev/null 2>&1; then
		echo "cluster netem.sh: installing nftables" >&2
		export DEBIAN_FRONTEND=noninteractive
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends nftables; } >&2 || die "apt-get install nftables failed"
	fi
	for i in $(seq "$n"); do
		ns=$(node_ns "$i")
		ip netns exec "$ns" nft delete table inet "$table" 2>/dev/null || true
		ip netns exec "$ns" nft -f - <<NFT || unsupported "nftables rule refused on node$i (kernel without nf_tables/numgen?)"
table inet $table {
	chain in {
		type filter hook input priority 0; policy accept;
		iifname "eth0" numgen random mod 10000 < $p counter drop
	}
}
NFT
	done
	echo "cluster netem.sh: dropping $2 of packets arriving on eth0 of node1..node$n"
	;;
off)
	for i in $(seq "$n"); do
		ns=$(node_ns "$i")
		ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
		! command -v nft >/dev/null 2>&1 || ip netns exec "$ns" nft delete table inet "$table" 2>/dev/null || true
	done
	echo "cluster netem.sh: links of node1..node$n restored"
	;;
*) die "$usage" ;;
esac
