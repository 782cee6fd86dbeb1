package affinity

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// fakeGroup is an in-process communicator: n ranks as goroutines, hosts
// as given.
type fakeGroup struct {
	n     int
	hosts []string
	mu    sync.Mutex
	cond  *sync.Cond
	slots [][]byte
	count int
	round int
}

type fakeRank struct {
	g    *fakeGroup
	rank int
}

func (r fakeRank) Rank() int    { return r.rank }
func (r fakeRank) Size() int    { return r.g.n }
func (r fakeRank) Host() string { return r.g.hosts[r.rank] }

func (r fakeRank) Allgather(send, recv []byte) error {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	round := g.round
	g.slots[r.rank] = append([]byte(nil), send...)
	g.count++
	if g.count == g.n {
		g.count = 0
		g.round++
		g.cond.Broadcast()
	}
	for g.round == round {
		g.cond.Wait()
	}
	for i, s := range g.slots {
		copy(recv[i*len(send):], s)
	}
	// All ranks must copy before the next round overwrites slots.
	g.count++
	if g.count == g.n {
		g.count = 0
		g.round++
		g.cond.Broadcast()
	}
	for g.round == round+1 {
		g.cond.Wait()
	}
	return nil
}

// runRanks runs f on every rank of a fake group and returns the results.
func runRanks[T any](hosts []string, f func(g Gatherer) T) []T {
	g := &fakeGroup{n: len(hosts), hosts: hosts, slots: make([][]byte, len(hosts))}
	g.cond = sync.NewCond(&g.mu)
	out := make([]T, len(hosts))
	var wg sync.WaitGroup
	for r := range hosts {
		wg.Go(func() { out[r] = f(fakeRank{g, r}) })
	}
	wg.Wait()
	return out
}

func TestCheckDisjoint(t *testing.T) {
	hosts := []string{"n1", "n1", "n2", "n2"}
	ok := []string{"0-3", "4-7", "0-3", "4-7"} // overlap only across hosts
	errs := runRanks(hosts, func(g Gatherer) error {
		return CheckDisjoint(g, mustParse(t, ok[g.Rank()]))
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}

	bad := []string{"0-3", "4-7", "0-3", "3-5,100"}
	errs = runRanks(hosts, func(g Gatherer) error {
		return CheckDisjoint(g, mustParse(t, bad[g.Rank()]))
	})
	for r, err := range errs {
		if err == nil || err.Error() != errs[0].Error() {
			t.Fatalf("rank %d got %v, rank 0 got %v: verdicts differ", r, err, errs[0])
		}
	}
	if msg := errs[0].Error(); !strings.Contains(msg, "ranks 2 and 3 on host n2 are both bound to cpus 3") {
		t.Errorf("error %q does not name the ranks, host and shared cpus", msg)
	}
	if !errors.Is(errs[0], ErrOverlap) {
		t.Errorf("error %q is not ErrOverlap", errs[0])
	}
	// The hint names the flag train has (-cpu-list; there is no -cpus).
	if msg := errs[0].Error(); !strings.Contains(msg, "its own -cpu-list") {
		t.Errorf("error %q: the hint does not name -cpu-list", msg)
	}

	// Unbound ranks (policy none) never conflict.
	errs = runRanks(hosts, func(g Gatherer) error { return CheckDisjoint(g, CPUSet{}) })
	for r, err := range errs {
		if err != nil {
			t.Errorf("unbound rank %d: %v", r, err)
		}
	}
}

func TestReport(t *testing.T) {
	hosts := []string{"n1", "n1"}
	plans := []Plan{
		{Policy: Cores, LocalRank: 0, CPUs: NewCPUSet(0, 1), Nodes: []int{0}, Threads: 2},
		{Policy: None, LocalRank: 1, Threads: 3},
	}
	got := runRanks(hosts, func(g Gatherer) []string {
		lines, err := Report(g, plans[g.Rank()])
		if err != nil {
			t.Error(err)
		}
		return lines
	})
	want := []string{"[n1:rank 0 local 0] cores 0-1 numa 0 threads 2", "[n1:rank 1 local 1] not bound threads 3"}
	for r := range got {
		if strings.Join(got[r], "\n") != strings.Join(want, "\n") {
			t.Errorf("rank %d got %q, want %q", r, got[r], want)
		}
	}
}

// TestMaskGroup: the ranks of a host bound by the launcher to masks of
// their own (mpirun -np 4 --map-by socket --bind-to socket: ranks 0 and 2
// on socket 0, 1 and 3 on socket 1) are grouped by mask, and planned as
// index of count within it each rank takes half its socket; planned as
// local rank of 4 it took a quarter.
func TestMaskGroup(t *testing.T) {
	topo := readFixture(t, "dual2s64t")
	hosts := []string{"n1", "n1", "n1", "n1", "n2", "n2"}
	socket := []string{"0-15,32-47", "16-31,48-63", "0-15,32-47", "16-31,48-63", "0-7", "0-7"}
	type got struct{ index, count int }
	res := runRanks(hosts, func(g Gatherer) got {
		i, n, err := MaskGroup(g, mustParse(t, socket[g.Rank()]))
		if err != nil {
			t.Errorf("rank %d: %v", g.Rank(), err)
		}
		return got{i, n}
	})
	want := []got{{0, 2}, {0, 2}, {1, 2}, {1, 2}, {0, 2}, {1, 2}}
	for r := range want {
		if res[r] != want[r] {
			t.Errorf("rank %d: index %d of %d, want %d of %d", r, res[r].index, res[r].count, want[r].index, want[r].count)
		}
	}
	for r := range 4 {
		mask := mustParse(t, socket[r])
		p, err := topo.Plan(mask, Request{LocalRank: res[r].index, LocalSize: res[r].count, Policy: Cores, PreferNUMA: -1})
		if err != nil {
			t.Fatal(err)
		}
		if p.Threads != 8 || !p.CPUs.Intersect(mask).Equal(p.CPUs) {
			t.Errorf("rank %d in %s: %d threads on %s, want 8 inside the mask", r, mask, p.Threads, p.CPUs)
		}
	}
}
