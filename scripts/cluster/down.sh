#!/usr/bin/env bash
# down.sh: tear the local test cluster down, as root. Idempotent.
#
# Kills every process still inside a cluster namespace (ranks, orteds,
# mpirun: `ip netns pids`), deletes the namespaces (which takes their veths
# and the bridge with them), /etc/netns/hpct-* and the state dir, then checks
# that none of it is left and exits 1 if something is.
# Environment: HPCT_CLUSTER (default hpct), as for up.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"
[ $# -eq 0 ] || { echo "cluster down.sh: usage: down.sh (no arguments; HPCT_CLUSTER names the cluster)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "cluster down.sh: must run as root" >&2; exit 1; }
command -v ip >/dev/null 2>&1 || { rm -rf "$STATE"; exit 0; } # up.sh never ran

ours() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$HPCT_CLUSTER-(hub|node[0-9]+)\$" || true; }
pids_in() { ip netns pids "$1" 2>/dev/null || true; }

spaces=$(ours)
for sig in TERM KILL; do
	pids=$(for ns in $spaces; do pids_in "$ns"; done)
	[ -n "$pids" ] || break
	# shellcheck disable=SC2086 # one word per pid
	kill -"$sig" $pids 2>/dev/null || true
	for _ in $(seq 40); do # up to 2 s
		[ -z "$(for ns in $spaces; do pids_in "$ns"; done)" ] && break
		sleep 0.05
	done
done
for ns in $spaces; do ip netns del "$ns" 2>/dev/null || true; done
rm -rf "$STATE"
for d in /etc/netns/"$HPCT_CLUSTER"-hub /etc/netns/"$HPCT_CLUSTER"-node*; do
	case "$d" in *'*') ;; *) rm -rf "$d" ;; esac
done
rmdir /etc/netns 2>/dev/null || true # only if empty (we may have created it)
# iproute2 leaves /run/netns behind (a bind mount of itself); drop it when empty.
if [ -d /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
	umount /run/netns 2>/dev/null || true
	rmdir /run/netns 2>/dev/null || true
fi

left=$(ours)
[ -z "$left" ] || { echo "cluster down.sh: namespaces left: $left" >&2; exit 1; }
echo "cluster down: no $HPCT_CLUSTER-* namespaces left"
