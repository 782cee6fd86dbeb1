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
#   netem.sh rate RATE        no netem needed: a token bucket (tc tbf) on every
#                             node's eth0 (egress) limits what each host sends
#                             to RATE, e.g. `netem.sh rate 200mbit`: a slower
#                             NIC, full duplex, behind a non-blocking switch
#   netem.sh off              undo all three (idempotent)
#   netem.sh check            exit 0 if the kernel has netem, 3 if not
#   netem.sh check-rate       exit 0 if the kernel has tbf, 3 if not
#
# Exit status 2: bad arguments (DELAY, LOSS or RATE not of the forms above),
# checked before anything else; 3: the kernel lacks what the mode needs
# (sch_netem for on and check, nf_tables for drop, sch_tbf for rate and
# check-rate). Nothing was changed in either case. Tests skip on 3.
# Environment: HPCT_CLUSTER, as for up.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"
die() { echo "cluster netem.sh: $*" >&2; exit 1; }
bad() { echo "cluster netem.sh: $*" >&2; exit 2; }
unsupported() { echo "cluster netem.sh: $*" >&2; exit 3; }
usage="usage: netem.sh on DELAY [LOSS] | drop LOSS | rate RATE | off | check | check-rate"

# bits RATE: RATE (100mbit, 1gbit, 500kbit) in bits per second, at least
# 1 kbit/s (tc keeps bytes per second: below 8 bit/s is no rate at all).
bits() {
	awk -v s="$1" 'BEGIN { m = 0; if (s ~ /^[0-9]+(\.[0-9]+)?gbit$/) m = 1e9; else if (s ~ /^[0-9]+(\.[0-9]+)?mbit$/) m = 1e6; else if (s ~ /^[0-9]+(\.[0-9]+)?kbit$/) m = 1e3
		if (m == 0) exit 1; sub(/[gmk]bit$/, "", s); if (s * m < 1000) exit 1; printf "%.0f\n", s * m }' ||
		bad "bad rate '$1' (want a number and kbit, mbit or gbit, at least 1kbit: e.g. 200mbit, 1gbit)"
}

# per10000 1% -> 100, 0.5% -> 50, 2 -> 200.
per10000() {
	awk -v s="$1" 'BEGIN { sub(/%$/, "", s); if (s !~ /^[0-9]+(\.[0-9]+)?$/ || s + 0 > 100) exit 1; printf "%d\n", s * 100 + 0.5 }' ||
		bad "bad loss '$1' (want a percentage from 0 to 100 such as 1% or 0.5%)"
}

# delay DELAY: refuses what tc netem would not read as a time with a unit
# (5ms, 0.5s, 100us; tc takes a bare number as microseconds).
delay() {
	[[ "$1" =~ ^[0-9]+(\.[0-9]+)?(s|sec|ms|msec|us|usec)$ ]] ||
		bad "bad delay '$1' (want a number and s, ms or us: e.g. 5ms)"
}

# Arguments first: a bad one changes nothing, whatever the kernel has.
case "${1:-}" in
on) { [ $# -ge 2 ] && [ $# -le 3 ]; } || bad "$usage"
	delay "$2"
	spec=(delay "$2")
	[ $# -lt 3 ] || { per10000 "$3" >/dev/null && spec+=(loss "${3%\%}%"); } ;;
rate) [ $# -eq 2 ] || bad "$usage"
	b=$(bits "$2") ;;
drop) [ $# -eq 2 ] || bad "$usage"
	p=$(per10000 "$2") ;;
off | check | check-rate) [ $# -eq 1 ] || bad "$usage" ;;
*) bad "$usage" ;;
esac

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
# have_tbf: the same for the token bucket filter (sch_tbf).
have_tbf() {
	local try=(tc qdisc add dev lo root tbf rate 1mbit burst 32kb latency 50ms)
	if ip netns exec "$HUB" "${try[@]}" 2>/dev/null; then
		ip netns exec "$HUB" tc qdisc del dev lo root 2>/dev/null || true
		return 0
	fi
	command -v modprobe >/dev/null 2>&1 && modprobe sch_tbf 2>/dev/null || return 1
	ip netns exec "$HUB" "${try[@]}" 2>/dev/null || return 1
	ip netns exec "$HUB" tc qdisc del dev lo root 2>/dev/null || true
}
why_not_tbf="this kernel has no tbf qdisc (CONFIG_NET_SCH_TBF unset and sch_tbf not loadable)"

why_not="this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM unset and sch_netem not loadable); 'netem.sh drop LOSS' needs only nf_tables"

table=hpct_loss
case "${1:-}" in
check)
	have_netem || unsupported "$why_not"
	echo "cluster netem.sh: netem supported"
	;;
on)
	have_netem || unsupported "$why_not"
	for i in $(seq "$n"); do
		ip netns exec "$(node_ns "$i")" tc qdisc replace dev eth0 root netem "${spec[@]}" ||
			die "tc netem ${spec[*]} on node$i failed"
	done
	echo "cluster netem.sh: netem ${spec[*]} on eth0 of node1..node$n"
	;;
check-rate)
	have_tbf || unsupported "$why_not_tbf"
	echo "cluster netem.sh: tbf supported"
	;;
rate)
	have_tbf || unsupported "$why_not_tbf"
	# Bucket: 1 ms at the rate, at least 32 KiB (a few full-size frames;
	# tbf splits larger GSO packets); queue: 50 ms at the rate, at least
	# 256 KiB, so TCP sees a switch buffer rather than a drop at once.
	burst=$((b / 8 / 1000 > 32768 ? b / 8 / 1000 : 32768))
	limit=$((b / 8 / 20 > 262144 ? b / 8 / 20 : 262144))
	for i in $(seq "$n"); do
		ip netns exec "$(node_ns "$i")" tc qdisc replace dev eth0 root tbf rate "$2" burst "$burst" limit "$limit" ||
			die "tc tbf rate $2 on node$i failed"
	done
	echo "cluster netem.sh: tbf rate $2 (burst $burst B, queue $limit B) on eth0 of node1..node$n"
	;;
drop)
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
	echo "cluster netem.sh: dropping ${2%\%}% of packets arriving on eth0 of node1..node$n"
	;;
off)
	for i in $(seq "$n"); do
		ns=$(node_ns "$i")
		ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
		! command -v nft >/dev/null 2>&1 || ip netns exec "$ns" nft delete table inet "$table" 2>/dev/null || true
	done
	echo "cluster netem.sh: links of node1..node$n restored"
	;;
esac
