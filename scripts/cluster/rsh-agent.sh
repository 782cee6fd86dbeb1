#!/usr/bin/env bash
# rsh-agent.sh [ssh-style options] HOST COMMAND...: what ssh would do for
# Open MPI, for the hosts of the local test cluster (up.sh). Give it to
# mpirun as `--mca plm_rsh_agent /abs/path/rsh-agent.sh` (mpirun.sh does).
#
# HOST is nodeI, user@nodeI or nodeI's address 10.77.0.(10+I). COMMAND runs,
# like ssh, as one string through `sh -c`, in namespace hpct-nodeI (network:
# its own eth0 and address; UTS: its own hostname nodeI; the filesystem is
# the machine's, so paths are the same on every host) and with a login-like
# environment (HOME USER LOGNAME SHELL and a default PATH), not the caller's:
# what a program needs must reach remote ranks through mpirun -x, as on a
# real cluster. HPCT_AGENT_KEEP_ENV=1 keeps the caller's environment instead.
# ssh options (-x, -p 22, -o Opt=val, ...) are accepted and ignored.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"
die() { echo "rsh-agent.sh: $*" >&2; exit 255; } # 255: what ssh exits with on its own errors

while [ $# -gt 0 ]; do
	case "$1" in
	--) shift; break ;;
	-[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 || die "option $1 needs a value" ;; # ssh options with a value
	-*) shift ;;
	*) break ;;
	esac
done
[ $# -ge 2 ] || die "usage: rsh-agent.sh [ssh options] HOST COMMAND..."
host=${1#*@}
shift
cmd="$*"

[ -s "$STATE/hosts" ] || die "no cluster: run scripts/cluster/up.sh first"
i=$(awk -v h="$host" '$1 ~ /^10\.77\.0\./ && ($1 == h || $2 == h || $2 == substr(h, 1, index(h ".", ".") - 1)) { sub(/^node/, "", $2); print $2; exit }' "$STATE/hosts")
[ -n "$i" ] || die "unknown host '$host' (cluster hosts: $(awk '$1 ~ /^10\.77/ {printf "%s ", $2}' "$STATE/hosts"))"
ns=$(node_ns "$i")

if [ "${HPCT_AGENT_KEEP_ENV:-0}" = 1 ]; then
	envp=(env HPCT_CLUSTER="$HPCT_CLUSTER")
else
	user=$(id -un)
	envp=(env -i HOME="${HOME:-/root}" USER="$user" LOGNAME="$user" SHELL=/bin/sh
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		HPCT_CLUSTER="$HPCT_CLUSTER")
	[ -z "${LANG:-}" ] || envp+=(LANG="$LANG")
fi
# shellcheck disable=SC2016
exec ip netns exec "$ns" unshare --uts -- "${envp[@]}" \
	sh -c 'hostname "$1" && exec sh -c "$2"' rsh-agent "node$i" "$cmd"
