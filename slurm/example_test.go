package slurm_test

import (
	"fmt"

	"hpctrain/slurm"
)

func ExampleExpandHostlist() {
	hosts, err := slurm.ExpandHostlist("node[01-03,07],rack[1-2]-gpu[1-2]")
	fmt.Println(hosts, err)
	_, err = slurm.ExpandHostlist("node[5-3]")
	fmt.Println(err)
	// Output:
	// [node01 node02 node03 node07 rack1-gpu1 rack1-gpu2 rack2-gpu1 rack2-gpu2] <nil>
	// hostlist "node[5-3]": reversed range "5-3" in "node[5-3]"
}

func ExampleResolve() {
	// A rank started by mpirun inside an sbatch script: it inherits the
	// batch shell's SLURM_PROCID=0, which must not be believed.
	env := map[string]string{
		"SLURM_JOB_ID": "17", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "1",
		"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
		"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
	}
	info, err := slurm.Resolve(1, 2, func(k string) string { return env[k] })
	fmt.Println(info.Rank, info.Size, info.LocalRank, info.LocalSize, err)
	fmt.Println(info.Decision)
	// Output:
	// 1 2 1 2 <nil>
	// rank 1 of 2 (local 1 of 2) from MPI_Comm_rank/size; ignored SLURM_PROCID (no SLURM_STEP_ID: batch-shell value, inherited by every rank mpirun starts); local rank from OMPI_COMM_WORLD_LOCAL_RANK/SIZE
}
