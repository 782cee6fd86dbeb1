package train

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"hpctrain/affinity"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
)

// planCPUs runs planCPU on every rank of a fake job of len(masks) ranks on
// one node, rank r with the allowed mask masks[r] (a list; "" for every
// online cpu) and threads, on the sysfs fixture machine, and returns the
// ranks' plans and errors.
func planCPUs(t *testing.T, machine string, threads int, masks ...string) ([]affinity.Plan, []error) {
	t.Helper()
	defer func(r string) { sysRoot = r }(sysRoot)
	sysRoot = filepath.Join("..", "affinity", "testdata", machine)
	ranks := mpi.NewFake(len(masks), 0)
	plans, errs := make([]affinity.Plan, len(ranks)), make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, c := range ranks {
		mask, err := affinity.Parse(masks[r])
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			plans[r], errs[r] = planCPU(c, threads, mask, nil)
		}()
	}
	wg.Wait()
	return plans, errs
}

// TestPlanCPU: PlaceCPU (hpctrain eval and predict) plans as a training
// run's default placement does, on the affinity fixtures: threads default
// to the physical cores in the mask per local rank (not logical cpus: SMT
// siblings left out), on a hybrid CPU to its P-cores, workers pinned core
// by core; ranks the launcher bound to masks of their own are planned
// among the ranks sharing theirs; -threads is honoured; more ranks than
// cpus run unbound, one thread each, with a warning. Before, eval and
// predict ran NumCPU()/local ranks unpinned threads whatever the machine.
func TestPlanCPU(t *testing.T) {
	for _, tc := range []struct {
		name, machine string
		threads       int
		masks         []string
		want          []string // each rank's plan, and " workers LIST" when pinned
		warn          string   // in every rank's warning ("": none)
	}{
		{"server, 2 ranks: physical cores", "server16c32t", 0, []string{"", ""},
			[]string{"cores 0-7 numa 0 threads 8 workers 0,1,2,3,4,5,6,7", "cores 8-15 numa 0 threads 8 workers 8,9,10,11,12,13,14,15"}, ""},
		{"server, -threads 3", "server16c32t", 3, []string{"", ""},
			[]string{"cores 0-2 numa 0 threads 3 workers 0,1,2", "cores 3-5 numa 0 threads 3 workers 3,4,5"}, ""},
		{"hybrid, 2 ranks: P-cores", "hybrid8p8e", 0, []string{"", ""},
			[]string{"cores 0,2,4,6 numa 0 threads 4 on P cores workers 0,2,4,6", "cores 8,10,12,14 numa 0 threads 4 on P cores workers 8,10,12,14"}, ""},
		{"hybrid, one process", "hybrid8p8e", 0, []string{""},
			[]string{"cores 0,2,4,6,8,10,12,14 numa 0 threads 8 on P cores workers 0,2,4,6,8,10,12,14"}, ""},
		// Open MPI's --bind-to socket of 4 ranks on 2 sockets: 2 ranks a
		// socket, each half its socket (not a quarter).
		{"launcher-bound sockets", "dual2s64t", 0, []string{"0-15,32-47", "0-15,32-47", "16-31,48-63", "16-31,48-63"},
			[]string{"cores 0-7 numa 0 threads 8 workers 0,1,2,3,4,5,6,7", "cores 8-15 numa 0 threads 8 workers 8,9,10,11,12,13,14,15",
				"cores 16-23 numa 1 threads 8 workers 16,17,18,19,20,21,22,23", "cores 24-31 numa 1 threads 8 workers 24,25,26,27,28,29,30,31"}, ""},
		// --bind-to core of 2 ranks: each its own core, no warning.
		{"launcher-bound cores", "vm2c", 0, []string{"0", "1"},
			[]string{"cores 0 numa 0 threads 1 workers 0", "cores 1 numa 0 threads 1 workers 1"}, ""},
		{"oversubscribed", "vm2c", 0, []string{"", "", ""},
			[]string{"not bound threads 1", "not bound threads 1", "not bound threads 1"}, "oversubscribed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OMP_NUM_THREADS", "") // no note of the environment's
			t.Setenv("OPENBLAS_NUM_THREADS", "")
			plans, errs := planCPUs(t, tc.machine, tc.threads, tc.masks...)
			for r, p := range plans {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				got := p.String()
				if p.WorkerCPUs != nil {
					got += " workers " + strings.Trim(strings.ReplaceAll(fmt.Sprint(p.WorkerCPUs), " ", ","), "[]")
				}
				if got != tc.want[r] {
					t.Errorf("rank %d: %s, want %s", r, got, tc.want[r])
				}
				if p.LocalRank != r || p.LocalSize != len(plans) {
					t.Errorf("rank %d: local %d of %d, want the node's numbering", r, p.LocalRank, p.LocalSize)
				}
				if (tc.warn == "") != (p.Warning == "") || !strings.Contains(p.Warning, tc.warn) {
					t.Errorf("rank %d: warning %q, want %q", r, p.Warning, tc.warn)
				}
			}
		})
	}
}

// TestPlanCPUAgreed: a mask that cannot be planned on one rank (no online
// cpu in it) stops every rank, the others with a line naming it, a usage
// error (exit 2) on all; so does a -threads out of range on one rank.
func TestPlanCPUAgreed(t *testing.T) {
	_, errs := planCPUs(t, "vm2c", 0, "", "7")
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "no online cpu") {
		t.Errorf("rank 1: %v, want its mask refused", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "planning cpu binding failed on rank 1") {
		t.Errorf("rank 0: %v, want rank 1's failure agreed", errs[0])
	}
	for r, err := range errs {
		if !errors.As(err, new(cli.UsageError)) {
			t.Errorf("rank %d: %v is not a usage error", r, err)
		}
	}
	ranks := mpi.NewFake(2, 0)
	var wg sync.WaitGroup
	errs = make([]error, 2)
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[r] = PlaceCPU(c, []int{1, MaxThreads + 1}[r])
		}()
	}
	wg.Wait()
	if errs[0] == nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "-threads 4097") {
		t.Errorf("-threads %d on rank 1: %v, %v", MaxThreads+1, errs[0], errs[1])
	}
}
