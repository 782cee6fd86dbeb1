package mpi

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hpctrain/internal/mpitest"
)

// reporter is what suite needs of a *testing.T; the MPI child process,
// which runs outside the testing framework, has its own.
type reporter interface {
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Error(args ...any)
}

// suite checks the Comm contract. Every implementation runs it; under a
// multi-rank implementation every rank runs it at once.
func suite(t reporter, c Comm) {
	n, r := c.Size(), c.Rank()
	if r < 0 || r >= n {
		t.Fatalf("rank %d outside [0,%d)", r, n)
	}
	if c.LocalRank() < 0 || c.LocalRank() >= c.LocalSize() || c.LocalSize() > n {
		t.Errorf("local rank %d of %d in a job of %d", c.LocalRank(), c.LocalSize(), n)
	}
	if c.Host() == "" {
		t.Error("empty host name")
	}

	// Sum: element i on rank r is r+i; the sum is n*i + n(n-1)/2.
	buf := make([]float32, 1000)
	for i := range buf {
		buf[i] = float32(r + i)
	}
	if err := c.AllreduceSum(buf); err != nil {
		t.Fatal(err)
	}
	for i, v := range buf {
		if want := float32(n*i + n*(n-1)/2); v != want {
			t.Fatalf("rank %d: allreduce[%d] = %v, want %v", r, i, v, want)
		}
	}
	b64 := []float64{float64(r), 1}
	if err := c.AllreduceSum64(b64); err != nil {
		t.Fatal(err)
	}
	if b64[0] != float64(n*(n-1)/2) || b64[1] != float64(n) {
		t.Errorf("rank %d: allreduce64 = %v", r, b64)
	}

	// Broadcast from the last rank.
	root := n - 1
	bb := []float32{float32(r), float32(r * 2)}
	if err := c.Bcast(bb, root); err != nil {
		t.Fatal(err)
	}
	if bb[0] != float32(root) || bb[1] != float32(2*root) {
		t.Errorf("rank %d: bcast got %v, want root %d's", r, bb, root)
	}
	by := []byte{byte(r), 7}
	if err := c.BcastBytes(by, 0); err != nil {
		t.Fatal(err)
	}
	if by[0] != 0 || by[1] != 7 {
		t.Errorf("rank %d: bcast bytes got %v", r, by)
	}

	// Allgather puts rank k's bytes at k*len.
	recv := make([]byte, 2*n)
	if err := c.Allgather([]byte{byte(r), byte(r + 100)}, recv); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < n; k++ {
		if recv[2*k] != byte(k) || recv[2*k+1] != byte(k+100) {
			t.Errorf("rank %d: allgather slot %d = %v", r, k, recv[2*k:2*k+2])
		}
	}
	// Non-blocking sums run in the order started, blocking calls after them.
	var reqs [3]Request
	bufs := make([][]float32, 3)
	for k := range bufs {
		bufs[k] = make([]float32, 1000*(k+1))
		for i := range bufs[k] {
			bufs[k][i] = float32(r*(k+1) + i)
		}
		c.IallreduceSum(bufs[k], &reqs[k])
	}
	one := []float64{1}
	if err := c.AllreduceSum64(one); err != nil || one[0] != float64(n) {
		t.Errorf("rank %d: blocking sum after non-blocking ones: %v %v", r, one, err)
	}
	for k := range bufs {
		if err := reqs[k].Wait(); err != nil {
			t.Fatal(err)
		}
		for i, v := range bufs[k] {
			if want := float32(n*i + (k+1)*n*(n-1)/2); v != want {
				t.Fatalf("rank %d: iallreduce %d [%d] = %v, want %v", r, k, i, v, want)
			}
		}
		if s, e := reqs[k].Span(); e.Before(s) {
			t.Errorf("span ends before it starts")
		}
	}
	// A request is reusable after Wait.
	c.IallreduceSum(bufs[0][:1], &reqs[0])
	if err := reqs[0].Wait(); err != nil {
		t.Fatal(err)
	}
	nodeBufferSuite(t, c)
	if err := c.Barrier(); err != nil {
		t.Fatal(err)
	}
}

// nodeBufferSuite sums parts of a NodeBuffer (or of the caller's own
// memory, where the communicator shares none) and reports whether the
// memory was shared. Parts not summed must stay as they were, and every
// rank must get the same bits even where the order of the sum matters.
func nodeBufferSuite(t reporter, c Comm) (shared bool) {
	n, r := c.Size(), c.Rank()
	const size = 1037 // not a whole number of cache lines
	nb, err := c.NodeBuffer(size)
	if err != nil {
		t.Fatal(err)
	}
	shared = nb != nil
	if !shared {
		nb = make([]float32, size)
	}
	if len(nb) != size {
		t.Fatalf("rank %d: node buffer of %d floats, want %d", r, len(nb), size)
	}
	fill := func() {
		for i := range nb {
			nb[i] = float32(r + i)
		}
	}
	check := func(what string, summed func(i int) bool) {
		for i, v := range nb {
			want := float32(r + i)
			if summed(i) {
				want = float32(n*i + n*(n-1)/2)
			}
			if v != want {
				t.Fatalf("rank %d: %s: node buffer [%d] = %v, want %v", r, what, i, v, want)
			}
		}
	}
	fill()
	if err := c.AllreduceSum(nb[100:900]); err != nil {
		t.Fatal(err)
	}
	check("sum of [100,900)", func(i int) bool { return i >= 100 && i < 900 })
	fill()
	var reqs [3]Request
	c.IallreduceSum(nb[900:], &reqs[0])
	c.IallreduceSum(nb[5:6], &reqs[1]) // fewer elements than ranks
	c.IallreduceSum(nb[:5], &reqs[2])
	for k := range reqs {
		if err := reqs[k].Wait(); err != nil {
			t.Fatal(err)
		}
	}
	check("sums of [900,1037), [5,6), [0,5)", func(i int) bool { return i < 6 || i >= 900 })
	// Rank 0 holds 2^24, rank 1 one, rank 2 -2^24: the order of the sum
	// decides the result, and every rank must still agree.
	for i := range nb {
		nb[i] = [3]float32{1 << 24, 1, -(1 << 24)}[r%3] * float32(1+i%3)
	}
	if err := c.AllreduceSum(nb); err != nil {
		t.Fatal(err)
	}
	mine := make([]byte, 4*size)
	for i, v := range nb {
		b := math.Float32bits(v)
		mine[4*i], mine[4*i+1], mine[4*i+2], mine[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
	}
	all := make([]byte, len(mine)*n)
	if err := c.Allgather(mine, all); err != nil {
		t.Fatal(err)
	}
	for k := 1; k < n; k++ {
		if !bytes.Equal(all[:len(mine)], all[k*len(mine):(k+1)*len(mine)]) {
			t.Fatalf("rank %d: ranks 0 and %d summed the node buffer to different bits", r, k)
		}
	}
	return shared
}

func TestSuiteSingle(t *testing.T) {
	c := NewSingle()
	suite(t, c)
	c.Close()
	if err := c.AllreduceSum(make([]float32, 1)); err != ErrClosed {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

func TestSuiteFake(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var wg sync.WaitGroup
			for _, c := range NewFake(n, 2) {
				wg.Add(1)
				go func() { defer wg.Done(); suite(rankT{t, c}, c) }()
			}
			wg.Wait()
		})
	}
}

// rankT reports a rank goroutine's failures to the test. t.Fatal may only
// be called from the test's own goroutine; a rank that fails instead
// records the error, kills the fake job so that no other rank waits for it
// in a collective, and ends its own goroutine.
type rankT struct {
	t *testing.T
	f *Fake
}

func (r rankT) Errorf(format string, args ...any) { r.t.Errorf(format, args...) }
func (r rankT) Error(args ...any)                 { r.t.Error(args...) }
func (r rankT) Fatalf(format string, args ...any) {
	r.t.Errorf("rank %d: "+format, append([]any{r.f.Rank()}, args...)...)
	r.f.Kill()
	runtime.Goexit()
}
func (r rankT) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// recorder is a reporter that only counts, for testing the harness itself.
type recorder struct {
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// One failing rank must not leave the others in a collective: they get
// ErrKilled at once, and the test ends (before the fix it waited for the
// whole test binary's timeout).
func TestFakeFailFast(t *testing.T) {
	ranks := NewFake(3, 0)
	rec := &recorder{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Rank() == 1 {
				rec.Errorf("rank 1 fails before the barrier")
				c.Kill()
				return
			}
			if err := c.Barrier(); err != ErrKilled {
				rec.Errorf("rank %d: barrier after a peer failed: %v, want ErrKilled", c.Rank(), err)
			}
			if err := c.AllreduceSum(make([]float32, 4)); err != ErrKilled {
				rec.Errorf("rank %d: allreduce after a peer failed: %v, want ErrKilled", c.Rank(), err)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ranks still waiting 10 s after a peer failed")
	}
	if len(rec.errors) != 1 {
		t.Errorf("want only rank 1's own failure, got %q", rec.errors)
	}
}

func TestFakeLocalRanks(t *testing.T) {
	ranks := NewFake(5, 2) // nodes: {0,1} {2,3} {4}
	want := [][2]int{{0, 2}, {1, 2}, {0, 2}, {1, 2}, {0, 1}}
	for r, c := range ranks {
		if got := [2]int{c.LocalRank(), c.LocalSize()}; got != want[r] {
			t.Errorf("rank %d: local %v, want %v", r, got, want[r])
		}
	}
}

// TestMain makes the test binary double as an MPI program: started by
// TestSuiteWorld under mpirun with HPCTRAIN_MPI_SUITE=1, each rank runs the
// suite against a real World and exits.
func TestMain(m *testing.M) {
	if g := os.Getenv("HPCTRAIN_MPI_NODE_GROUP"); g != "" {
		os.Exit(groupChild(g))
	}
	if os.Getenv("HPCTRAIN_MPI_SUITE") != "" {
		os.Exit(worldChild())
	}
	os.Exit(m.Run())
}

// TestSuiteWorld runs the suite under the real mpirun with 3 ranks.
func TestSuiteWorld(t *testing.T) {
	t.Setenv("HPCTRAIN_MPI_SUITE", "1")
	out := mpitest.Run(t, 60*time.Second, 3, os.Args[0])
	if got := strings.Count(out, "world suite: ok"); got != 3 {
		t.Errorf("%d of 3 ranks passed the suite:\n%s", got, out)
	}
}

type childReporter struct{ failed bool }

func (c *childReporter) Errorf(f string, a ...any) { c.failed = true; fmt.Printf(f+"\n", a...) }
func (c *childReporter) Error(a ...any)            { c.failed = true; fmt.Println(a...) }
func (c *childReporter) Fatalf(f string, a ...any) { fmt.Printf(f+"\n", a...); os.Exit(1) }
func (c *childReporter) Fatal(a ...any)            { fmt.Println(a...); os.Exit(1) }

func worldChild() int {
	w, err := Start()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var rep childReporter
	if w.Size() != 3 || w.LocalSize() != 3 {
		rep.Errorf("size %d local size %d, want 3 and 3", w.Size(), w.LocalSize())
	}
	suite(&rep, w)
	if w.regs.Load() == nil {
		rep.Errorf("rank %d: NodeBuffer shared no memory between the 3 ranks of a node", w.Rank())
	}
	if err := w.Close(); err != nil {
		rep.Error(err)
	}
	if rep.failed {
		return 1
	}
	fmt.Println("world suite: ok")
	return 0
}

// TestWorldNodeGroups runs the node buffer's sums with 4 real ranks cut
// into "nodes" of 2 (so the shares cross nodes through MPI) and of 3 (one
// node of 3 and one of 1: nodes of different sizes share nothing, and the
// sums are MPI's).
func TestWorldNodeGroups(t *testing.T) {
	for _, tc := range []struct {
		group  string
		shared bool
	}{{"2", true}, {"3", false}} {
		t.Run("group"+tc.group, func(t *testing.T) {
			t.Setenv("HPCTRAIN_MPI_NODE_GROUP", tc.group)
			out := mpitest.Run(t, 60*time.Second, 4, os.Args[0])
			want := fmt.Sprintf("node groups: ok, shared %v", tc.shared)
			if got := strings.Count(out, want); got != 4 {
				t.Errorf("%d of 4 ranks printed %q:\n%s", got, want, out)
			}
		})
	}
}

// groupChild is a rank of TestWorldNodeGroups.
func groupChild(group string) int {
	g, err := strconv.Atoi(group)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	nodeGroup = g
	w, err := Start()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var rep childReporter
	shared := nodeBufferSuite(&rep, w)
	if err := w.Close(); err != nil {
		rep.Error(err)
	}
	if rep.failed {
		return 1
	}
	fmt.Printf("node groups: ok, shared %v\n", shared)
	return 0
}
