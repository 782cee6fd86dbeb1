package slurm

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	batchShell := map[string]string{ // what mpirun's ranks inherit from the batch shell
		"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
		"SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)",
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name             string
		mpiRank, mpiSize int
		env              map[string]string
		rank, size       int
		lrank, lsize     int
		src, lsrc        string
		decision         []string // substrings of Decision
	}{
		{"nothing", -1, 0, nil, 0, 1, 0, 1, "default", "single-host", []string{"default", "assuming one host"}},
		{"mpi only", 2, 4, nil, 2, 4, 2, 4, "mpi", "single-host", []string{"from MPI_Comm_rank/size"}},
		{"ompi", -1, 0, map[string]string{
			"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
		}, 3, 4, 1, 2, "ompi", "ompi", []string{"OMPI_COMM_WORLD_RANK/SIZE"}},
		{"mpi + ompi agree", 3, 4, map[string]string{
			"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
		}, 3, 4, 1, 2, "mpi", "ompi", []string{"MPI_Comm_rank/size", "local rank from OMPI_COMM_WORLD_LOCAL"}},
		{"mpirun in sbatch: batch-shell SLURM_PROCID ignored", 3, 4, with(batchShell,
			"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4",
			"OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
			3, 4, 1, 2, "mpi", "ompi", []string{"ignored SLURM_PROCID"}},
		{"mpi disagrees with stale ompi", 1, 2, map[string]string{
			"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
		}, 1, 2, 1, 2, "mpi", "single-host", []string{"ignored OMPI_COMM_WORLD_RANK/SIZE (rank 0 of 1)"}},
		{"hydra pmi", -1, 0, map[string]string{
			"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4",
		}, 5, 8, 1, 4, "pmi", "pmi", []string{"PMI_RANK/PMI_SIZE"}},
		{"pmix rank alone", -1, 0, map[string]string{"PMIX_RANK": "1"},
			0, 1, 0, 1, "default", "single-host", []string{"ignored PMIX_RANK"}},
		{"srun step", -1, 0, with(batchShell, "SLURM_STEP_ID", "0", "SLURM_PROCID", "3", "SLURM_LOCALID", "1", "SLURM_NODEID", "1"),
			3, 4, 1, 2, "slurm", "slurm", []string{"srun step", "SLURM_LOCALID/TASKS_PER_NODE"}},
		{"batch shell alone, two nodes", -1, 0, batchShell,
			0, 1, -1, 0, "default", "", []string{"ignored SLURM_PROCID", "local rank unknown"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Resolve(c.mpiRank, c.mpiSize, mapEnv(c.env))
			if err != nil {
				t.Fatal(err)
			}
			if got.Rank != c.rank || got.Size != c.size || got.LocalRank != c.lrank || got.LocalSize != c.lsize ||
				got.Source != c.src || got.LocalSource != c.lsrc {
				t.Fatalf("got %+v\nwant rank %d/%d local %d/%d src %s/%s", got, c.rank, c.size, c.lrank, c.lsize, c.src, c.lsrc)
			}
			for _, s := range c.decision {
				if !strings.Contains(got.Decision, s) {
					t.Errorf("Decision %q lacks %q", got.Decision, s)
				}
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_RANK"},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_RANK=2 not below OMPI_COMM_WORLD_SIZE=2"},
		{map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "2"}, "MPI_LOCALRANKID=3"},
		{map[string]string{"SLURM_STEP_ID": "0", "SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, "SLURM_PROCID=4"},
		{map[string]string{"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0",
			"SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "2(x"}, "SLURM_TASKS_PER_NODE"},
		{map[string]string{"SLURM_NNODES": "two"}, "SLURM_NNODES"},
	} {
		_, err := Resolve(-1, 0, mapEnv(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v: error %v, want it to contain %q", c.env, err, c.want)
		}
	}
}

func TestResolveMisusePanics(t *testing.T) {
	defer func() {
		if r := recover(); r != "slurm: Resolve with MPI rank outside [0, size)" {
			t.Fatalf("recovered %v", r)
		}
	}()
	Resolve(4, 4, mapEnv(nil))
}
