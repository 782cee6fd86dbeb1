# shellcheck shell=bash disable=SC2034
# Sourced by the scripts in scripts/cluster/: names shared by all of them.
#
# HPCT_CLUSTER (default "hpct") prefixes every namespace, so that
#   $HPCT_CLUSTER-hub          holds the bridge br0 (the "switch")
#   $HPCT_CLUSTER-nodeI        is host nodeI, address 10.77.0.(10+I)/24 on eth0
# and the state lives in /run/$HPCT_CLUSTER-cluster (hosts, nodes).
# The addresses exist only inside these namespaces; the root namespace's
# networking is never touched.
HPCT_CLUSTER=${HPCT_CLUSTER:-hpct}
case "$HPCT_CLUSTER" in
*[!a-zA-Z0-9_-]* | "") echo "scripts/cluster: bad HPCT_CLUSTER '$HPCT_CLUSTER'" >&2; exit 2 ;;
esac
HUB=$HPCT_CLUSTER-hub
STATE=/run/$HPCT_CLUSTER-cluster
SUBNET=10.77.0.0/24
node_ns() { echo "$HPCT_CLUSTER-node$1"; }
node_ip() { echo "10.77.0.$((10 + $1))"; }
