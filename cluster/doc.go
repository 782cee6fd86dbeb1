// Package cluster is test-only: its one job is to run MPI jobs across the
// hosts of a local multi-host test cluster and check what single-host runs
// cannot: that ranks land on the hosts asked for with the right local ranks,
// that data crosses the links over TCP (also when the links delay or drop
// packets), and that tearing the cluster down leaves nothing behind.
//
// The cluster is scripts/cluster: each host nodeI is a Linux network
// namespace hpct-nodeI (own address 10.77.0.(10+I), own hostname through a UTS
// namespace) on a bridge in namespace hpct-hub, and Open MPI starts ranks on
// the hosts through scripts/cluster/rsh-agent.sh. The tests need root and
// mpirun; without them, or with -short, they skip.
package cluster
