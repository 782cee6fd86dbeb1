package collective

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"hpctrain/gpu/cuda"
	"hpctrain/gpu/kernels"
	"hpctrain/internal/cudaemu"
	"hpctrain/internal/mpitest"
	"hpctrain/mpi"
)

// childEnv makes the test binary, started by mpirun, run child instead of
// the tests.
const childEnv = "HPCTRAIN_COLLECTIVE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// TestUnderMPI runs child on 2 ranks on the emulated device (each rank its
// own device: HPCTRAIN_CUDAEMU_DEVICES=2, ordinal = local rank), which
// checks every mode and prints one "ok" line per rank and check.
func TestUnderMPI(t *testing.T) {
	dir, err := cudaemu.Dir()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LD_LIBRARY_PATH", dir)
	t.Setenv("HPCTRAIN_CUDAEMU_DEVICES", "2")
	t.Setenv("HPCTRAIN_KERNEL_CACHE", t.TempDir())
	t.Setenv(childEnv, "1")
	out := mpitest.Run(t, 4*time.Minute, 2, os.Args[0])
	for _, check := range childChecks {
		for r := 0; r < 2; r++ {
			if line := fmt.Sprintf("ok rank %d: %s", r, check); !strings.Contains(out, line+"\n") {
				t.Errorf("no line %q", line)
			}
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(out)
	}
}

// childChecks are the checks child reports, in order.
var childChecks = []string{
	"nccl: 4 buckets", "nccl: 1 bucket", "nccl: allocations",
	"mpi: 4 buckets", "mpi: 1 bucket", "mpi: allocations",
	"mpi-aware: 4 buckets", "mpi-aware: 1 bucket", "mpi-aware: allocations",
	"corrupted NCCL id", "abort",
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{NCCL, MPI} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("gloo"); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("ParseMode(gloo): %v", err)
	}
}

// TestBuckets: the cut of train/buckets.go: from the end, each bucket
// closes at the first layer start that makes it at least maxBytes.
func TestBuckets(t *testing.T) {
	starts := []int{0, 120, 300, 450, 700, 860}
	for _, c := range []struct {
		max  int
		want [][2]int
	}{
		{800, [][2]int{{700, 1000}, {450, 700}, {120, 450}, {0, 120}}},
		{0, [][2]int{{0, 1000}}},
		{1, [][2]int{{860, 1000}, {700, 860}, {450, 700}, {300, 450}, {120, 300}, {0, 120}}},
		{560, [][2]int{{860, 1000}, {700, 860}, {450, 700}, {300, 450}, {120, 300}, {0, 120}}}, // "at least": 140 floats close a bucket
		{564, [][2]int{{700, 1000}, {450, 700}, {300, 450}, {120, 300}, {0, 120}}},
		{1 << 20, [][2]int{{0, 1000}}},
	} {
		b := buckets(1000, starts, c.max)
		var got [][2]int
		for _, bk := range b {
			got = append(got, [2]int{bk.lo, bk.hi})
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("max %d: %v, want %v", c.max, got, c.want)
		}
	}
}

// ---- the child: one rank of the job

// Test data: n gradients in layers starting at starts; rank r's gradient
// i is (r+1)*(i%17-8), so the sum over ranks is exact in float32.
const (
	n           = 1000
	bucketBytes = 800
)

var starts = []int{0, 120, 300, 450, 700, 860}

type rank struct {
	w       *mpi.World
	ctx     *cuda.Context
	compute *cuda.Stream
	k       *cuda.Module
	grads   cuda.Ptr
	src     []float32 // page-locked: what "backward" writes
	out     []float32 // page-locked: the reduced gradients read back
	check   string    // the check running, for failures
	infAt   int       // >= 0: rank 0's gradient there is +Inf
}

// fail ends the whole job: a rank that returned would leave the other
// waiting in a collective.
func (r *rank) fail(format string, a ...any) {
	fmt.Printf("FAIL rank %d: %s: %s\n", r.w.Rank(), r.check, fmt.Sprintf(format, a...))
	os.Stdout.Sync()
	r.w.Abort(1)
}

func (r *rank) must(err error) {
	if err != nil {
		r.fail("%v", err)
	}
}

func (r *rank) ok() { fmt.Printf("ok rank %d: %s\n", r.w.Rank(), r.check) }

func child() int {
	w, err := mpi.Start()
	if err != nil {
		fmt.Println("FAIL:", err)
		return 1
	}
	runtime.LockOSThread()
	r := &rank{w: w, check: "setup", infAt: -1}
	r.ctx, err = cuda.OpenDevice(w.LocalRank())
	r.must(err)
	r.k, err = r.ctx.CompileModule("grads", kernels.Source("grads.cu"))
	r.must(err)
	r.compute, err = r.ctx.NewStream()
	r.must(err)
	r.grads, err = r.ctx.Alloc(4 * n)
	r.must(err)
	hp, err := r.ctx.HostAlloc(2 * 4 * n)
	r.must(err)
	all := unsafe.Slice((*float32)(hp), 2*n)
	r.src, r.out = all[:n], all[n:]
	nccl, err := NewNCCL(w)
	r.must(err)

	for _, mode := range []string{"nccl", "mpi", "mpi-aware"} {
		m := MPI
		if mode == "nccl" {
			m = NCCL
		}
		cudaAware = func() bool { return mode == "mpi-aware" }
		for _, bb := range []int{bucketBytes, 0} {
			red, err := New(r.ctx, r.compute, r.k, r.grads, n, starts, bb, m, w, nccl)
			r.must(err)
			if red.aware != (mode == "mpi-aware") {
				r.fail("CUDA-aware %v in mode %s", red.aware, mode)
			}
			r.check = fmt.Sprintf("%s: %d bucket", mode, red.Buckets())
			if red.Buckets() != 1 {
				r.check += "s"
			}
			r.steps(red, m)
			r.ok()
			if bb != 0 {
				r.check = mode + ": allocations"
				r.allocs(red)
				r.ok()
			}
			r.must(red.Close())
		}
	}
	r.check = "corrupted NCCL id"
	if c, err := NewNCCL(corrupt{w}); err == nil {
		c.Destroy()
		r.fail("NewNCCL succeeded with rank 1's id corrupted")
	} else if strings.Contains(err.Error(), "\n") {
		r.fail("error of more than one line: %q", err)
	}
	r.ok()
	r.check = "abort"
	r.abort(nccl)
	r.ok()
	r.must(w.Close())
	return 0
}

// corrupt is a HostComm whose broadcast garbles the NCCL id on rank 1.
type corrupt struct{ *mpi.World }

func (c corrupt) BcastBytes(buf []byte, root int) error {
	err := c.World.BcastBytes(buf, root)
	if c.Rank() == 1 {
		buf[len(buf)-1] ^= 0xff
	}
	return err
}

// value is rank r's gradient i.
func value(r, i int) float32 { return float32((r + 1) * (i%17 - 8)) }

// sum is the reduced gradient i over size ranks.
func sum(size, i int) float32 { return float32(size * (size + 1) / 2 * (i%17 - 8)) }

// backward plays a network's backward on the compute stream: the
// gradients start as garbage (NaN), then each layer's, last layer first,
// are written and Ready is told. A bucket started before its layers were
// written would sum NaN. It returns, per layer, how many buckets had
// started their NCCL all-reduce after that layer's Ready (enters).
func (r *rank) backward(red *Reducer, enters *int, counts []int) {
	for i := range r.src {
		r.src[i] = float32(math.NaN())
	}
	r.must(cuda.CopyHtoD(r.grads, unsafe.Pointer(&r.src[0]), 4*n, r.compute))
	for i := range r.src {
		r.src[i] = value(r.w.Rank(), i)
	}
	if r.w.Rank() == 0 && r.infAt >= 0 {
		r.src[r.infAt] = float32(math.Inf(1))
	}
	for l := len(starts) - 1; l >= 0; l-- {
		lo, hi := starts[l], n
		if l+1 < len(starts) {
			hi = starts[l+1]
		}
		r.must(cuda.CopyHtoD(r.grads.Add(4*lo), unsafe.Pointer(&r.src[lo]), 4*(hi-lo), r.compute))
		red.Ready(lo)
		if counts != nil {
			counts[l] = *enters
		}
	}
}

// read copies the reduced gradients into r.out once the compute stream,
// ordered after the reductions, gets there.
func (r *rank) read() {
	r.must(cuda.CopyDtoH(unsafe.Pointer(&r.out[0]), r.grads, 4*n, r.compute))
	r.must(r.compute.Sync())
}

// steps runs the checks of one reducer: sums with overlap, unscaling,
// poison and overflow agreed by all ranks, and recovery.
func (r *rank) steps(red *Reducer, m Mode) {
	size := r.w.Size()
	var enters, leaves int
	var order []int
	red.SetWatch(func(b int) { enters++; order = append(order, b) }, func() { leaves++ })
	counts := make([]int, len(starts))
	step := func(unscale float32) bool {
		enters, leaves, order = 0, 0, order[:0]
		r.backward(red, &enters, counts)
		comm, err := red.Wait()
		r.must(err)
		if comm <= 0 {
			r.fail("comm time %v", comm)
		}
		// Watched: NCCL's all-reduce calls, then the waits for them; MPI's
		// calls. Each in bucket order.
		rounds := 1
		if m == NCCL {
			rounds = 2
		}
		if enters != rounds*red.Buckets() || leaves != enters {
			r.fail("watch: %d enters, %d leaves for %d buckets", enters, leaves, red.Buckets())
		}
		for i, b := range order {
			if b != i%red.Buckets() {
				r.fail("watch saw buckets %v, want 0, 1, ... in order", order)
			}
		}
		finite, err := red.Finish(unscale)
		r.must(err)
		r.read()
		return finite
	}

	// Overlap: with NCCL a bucket starts at the Ready of its first layer;
	// MPI copies buckets out then and calls MPI in Wait.
	if !step(1) {
		r.fail("finite sums reported not finite")
	}
	for l, s := range starts {
		want := 0
		if m == NCCL && red.Buckets() > 1 {
			for _, bk := range red.b {
				if bk.lo >= s {
					want++
				}
			}
		}
		if counts[l] != want {
			r.fail("after Ready(%d), %d all-reduces started, want %d (buckets %v)", s, counts[l], want, red.b)
		}
	}
	for i, v := range r.out {
		if v != sum(size, i) {
			r.fail("gradient %d = %v, want %v", i, v, sum(size, i))
		}
	}
	// Unscaling.
	if !step(0.25) {
		r.fail("finite sums reported not finite (unscale 0.25)")
	}
	for i, v := range r.out {
		if want := sum(size, i) * 0.25; v != want {
			r.fail("unscaled gradient %d = %v, want %v", i, v, want)
		}
	}
	// Poison on rank 1: every rank sees it.
	if r.w.Rank() == 1 {
		red.Poison()
	}
	if step(1) {
		r.fail("rank 1 poisoned the gradients, yet Finish says finite")
	}
	if v := r.out[n-1]; !math.IsNaN(float64(v)) {
		r.fail("the poisoned element is %v, want NaN", v)
	}
	// An overflow on rank 0 only (an Inf in a middle layer): every rank
	// skips.
	r.infAt = 500
	if step(0.5) {
		r.fail("rank 0's Inf did not make Finish false")
	}
	r.infAt = -1
	// Recovery: the next step is clean.
	if !step(1) {
		r.fail("finite sums reported not finite after a poisoned step")
	}
	for i, v := range r.out {
		if v != sum(size, i) {
			r.fail("after recovery, gradient %d = %v, want %v", i, v, sum(size, i))
		}
	}
}

// allocs: a whole step (backward's Ready calls, Wait, Finish) allocates
// nothing on the Go heap. Both ranks run the same number of steps.
func (r *rank) allocs(red *Reducer) {
	red.SetWatch(nil, nil)
	for i := range r.src {
		r.src[i] = value(r.w.Rank(), i)
	}
	run := func() {
		for l := len(starts) - 1; l >= 0; l-- {
			red.Ready(starts[l])
		}
		if _, err := red.Wait(); err != nil {
			r.fail("%v", err)
		}
		if _, err := red.Finish(1); err != nil {
			r.fail("%v", err)
		}
	}
	if a := testing.AllocsPerRun(5, run); a != 0 {
		r.fail("%v allocations per step", a)
	}
}

// abort: Abort from another goroutine while this rank's NCCL all-reduce
// blocks (rank 0; rank 1 joins late) makes the call fail once it returns
// (the emulator cannot interrupt MPI), and every later Wait fails at once.
func (r *rank) abort(nccl *cuda.Comm) {
	red, err := New(r.ctx, r.compute, r.k, r.grads, n, starts, 0, NCCL, r.w, nccl)
	r.must(err)
	done := make(chan struct{})
	if r.w.Rank() == 0 {
		go func() {
			time.Sleep(300 * time.Millisecond)
			red.Abort()
			close(done)
		}()
	} else {
		time.Sleep(1500 * time.Millisecond)
	}
	for i := range r.src {
		r.src[i] = value(r.w.Rank(), i)
	}
	_, err = red.Wait()
	if r.w.Rank() == 0 {
		<-done
		if err == nil {
			r.fail("Wait succeeded although Abort ran while it blocked")
		}
		if nccl.AsyncError() == nil {
			r.fail("ncclCommGetAsyncError reports nothing after Abort")
		}
	} else {
		r.must(err)
		go func() {
			red.Abort()
			close(done)
		}()
		<-done
	}
	r.must(r.w.Barrier())
	if _, err := red.Wait(); err == nil {
		r.fail("Wait after Abort succeeded")
	}
}
