#!/usr/bin/env bash
# mpirun.sh MPIRUN-ARGS...: mpirun for the local test cluster (up.sh).
#
#   scripts/cluster/mpirun.sh -np 4 --host node1:2,node2:2 ./hpctrain train ...
#
# mpirun itself runs on node1 (in namespace hpct-node1, hostname node1), so
# every byte between hosts, ORTE's out-of-band channel included, crosses the
# bridge: the orted that rsh-agent.sh starts on nodeI connects back to mpirun
# at 10.77.0.11. Added before your arguments:
#   --mca plm_rsh_agent scripts/cluster/rsh-agent.sh (absolute path)
#   --mca pml ob1 --mca osc ^ucx --mca btl $HPCT_BTL (default tcp,self: TCP
#         even between ranks of one host; vader,tcp,self for shared memory
#         within a host and TCP between hosts)
#   --mca btl_tcp_if_include / oob_tcp_if_include 10.77.0.0/24
#   -x PATH -x HOME, and -x for each of LD_LIBRARY_PATH GOMAXPROCS GODEBUG
#         OMP_NUM_THREADS OPENBLAS_NUM_THREADS GOTOOLCHAIN and the names in
#         $HPCT_EXPORT that are set (remote ranks get a login-like environment
#         from rsh-agent.sh, not yours)
# and run through scripts/mpirun.sh, the launcher users run, which adds
# --oversubscribe --bind-to none, the OOB keepalive that ends a job whose
# host was lost, and OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 when uid is 0.
# Environment: HPCT_CLUSTER, HPCT_BTL, HPCT_EXPORT.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"
die() { echo "cluster mpirun.sh: $*" >&2; exit 1; }
[ -s "$STATE/nodes" ] || die "no cluster: run $here/up.sh first"
ns1=$(node_ns 1)
ip netns list | awk '{print $1}' | grep -qx "$ns1" || die "namespace $ns1 missing: run $here/up.sh"

args=(
	--mca plm_rsh_agent "$here/rsh-agent.sh"
	--mca pml ob1 --mca osc '^ucx' --mca btl "${HPCT_BTL:-tcp,self}"
	--mca btl_tcp_if_include "$SUBNET" --mca oob_tcp_if_include "$SUBNET"
)
for v in PATH HOME LD_LIBRARY_PATH GOMAXPROCS GODEBUG OMP_NUM_THREADS OPENBLAS_NUM_THREADS GOTOOLCHAIN ${HPCT_EXPORT:-}; do
	[ -z "${!v+x}" ] || args+=(-x "$v")
done
# shellcheck disable=SC2016
exec ip netns exec "$ns1" unshare --uts -- \
	sh -c 'hostname node1 && exec "$@"' mpirun.sh "$here/../mpirun.sh" "${args[@]}" "$@"
