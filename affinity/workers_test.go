package affinity

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// sumTask adds its items into per-worker sums; trivial work for latency.
type sumTask struct {
	seen []atomic.Int64 // seen[item] counts visits
	work []int64        // per worker
}

func (s *sumTask) Run(w, lo, hi int) {
	for i := lo; i < hi; i++ {
		if s.seen != nil {
			s.seen[i].Add(1)
		}
		s.work[w] += int64(i)
	}
}

type nopTask struct{}

func (nopTask) Run(w, lo, hi int) {}

func allowedCPUs(t testing.TB) []int {
	t.Helper()
	mask, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	return mask.CPUs()
}

func TestWorkersRunCoversEveryItemOnce(t *testing.T) {
	for _, nw := range []int{1, 2, 3, 5} {
		w := NewUnpinnedWorkers(nw)
		for _, n := range []int{0, 1, 2, 3, 7, 100} {
			task := &sumTask{seen: make([]atomic.Int64, n), work: make([]int64, nw)}
			w.Run(n, task)
			for i := range task.seen {
				if got := task.seen[i].Load(); got != 1 {
					t.Fatalf("workers %d n %d: item %d visited %d times", nw, n, i, got)
				}
			}
		}
		w.Close()
	}
}

// chunkTask records each worker's chunk.
type chunkTask struct{ lo, hi []int }

func (c *chunkTask) Run(w, lo, hi int) { c.lo[w], c.hi[w] = lo, hi }

func TestWorkersChunks(t *testing.T) {
	w := NewUnpinnedWorkers(3)
	defer w.Close()
	c := &chunkTask{lo: []int{-1, -1, -1}, hi: []int{-1, -1, -1}}
	w.Run(2, c) // chunks [0,0) [0,1) [1,2): worker 0 skipped
	if c.lo[0] != -1 || c.lo[1] != 0 || c.hi[1] != 1 || c.lo[2] != 1 || c.hi[2] != 2 {
		t.Fatalf("chunks lo %v hi %v", c.lo, c.hi)
	}
	w.Run(10, c) // [0,3) [3,6) [6,10)
	if c.lo[0] != 0 || c.hi[0] != 3 || c.hi[1] != 6 || c.hi[2] != 10 {
		t.Fatalf("chunks lo %v hi %v", c.lo, c.hi)
	}
}

func TestWorkersRunAllocatesNothing(t *testing.T) {
	w, err := NewWorkers(allowedCPUs(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	task := &sumTask{work: make([]int64, w.Workers())}
	if a := testing.AllocsPerRun(1000, func() { w.Run(1000, task) }); a != 0 {
		t.Fatalf("Workers.Run allocates %v times per call, want 0", a)
	}
}

// spinTask busy-waits for d in Go code, as a C call holds its thread.
type spinTask time.Duration

func (d spinTask) Run(w, lo, hi int) {
	for end := time.Now().Add(time.Duration(d)); time.Now().Before(end); {
	}
}

// TestWorkersRunYields checks that a goroutine that does nothing but Run
// tasks still lets Go reschedule it now and then (Workers.yield): with one
// P, a goroutine made runnable during a loop of Runs gets to run inside
// one of Run's yields, not only when Go's sysmon preempts the loop after
// 10 ms. Neither the clock nor the scheduler promises more: a busy
// machine can deschedule the thread for longer than yieldEvery (CI saw a
// loop of 8 ms with no Run past the 4 ms mark), and a Gosched may resume
// the caller before a goroutine in the local queue (one schedule in 61
// takes the global queue first). So the test spawns a goroutine up to
// five times and needs one of them to run inside a yield; without the
// yield none ever does.
func TestWorkersRunYields(t *testing.T) {
	if 2*yieldEvery >= 10*time.Millisecond {
		t.Fatalf("yieldEvery %v: twice it must stay under Go's 10 ms preemption slice", yieldEvery)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var inYield atomic.Bool
	defer func(g func()) { gosched = g }(gosched)
	gosched = func() {
		inYield.Store(true)
		runtime.Gosched()
		inYield.Store(false)
	}
	w := NewUnpinnedWorkers(1)
	if err := w.Lead(); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	task := spinTask(50 * time.Microsecond)
	const rounds = 5
	for range rounds {
		var ran, inside atomic.Bool
		go func() {
			inside.Store(inYield.Load())
			ran.Store(true)
		}()
		for start := time.Now(); !ran.Load(); {
			if time.Since(start) > 10*time.Second {
				t.Fatal("a runnable goroutine did not run in 10 s of Runs on one P")
			}
			w.Run(1, task)
		}
		if inside.Load() {
			return
		}
	}
	t.Fatalf("in %d tries a goroutine made runnable during Runs on one P ran only when Go preempted the loop, never at a yield: Run does not yield", rounds)
}

// cpuSampler spins for a while on each worker, recording CurrentCPU.
type cpuSampler struct {
	bad  []int // bad[w]: samples off the worker's cpu
	n    []int
	want []int
	dur  time.Duration
}

func (s *cpuSampler) Run(w, lo, hi int) {
	end := time.Now().Add(s.dur)
	for time.Now().Before(end) {
		if CurrentCPU() != s.want[w] {
			s.bad[w]++
		}
		s.n[w]++
	}
}

func TestWorkersRunOnTheirCPUs(t *testing.T) {
	cpus := allowedCPUs(t)
	w, err := NewWorkers(cpus)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := &cpuSampler{bad: make([]int, len(cpus)), n: make([]int, len(cpus)), want: cpus, dur: 5 * time.Millisecond}
	for i := range cpus {
		if w.CPU(i) != cpus[i] {
			t.Fatalf("worker %d CPU() = %d, want %d", i, w.CPU(i), cpus[i])
		}
	}
	w.Run(len(cpus), s)
	for i := range cpus {
		if s.n[i] == 0 || s.bad[i] != 0 {
			t.Errorf("worker %d pinned to cpu %d: %d of %d samples elsewhere", i, cpus[i], s.bad[i], s.n[i])
		}
	}
	masks, err := ThreadMasks()
	if err != nil {
		t.Fatal(err)
	}
	pinned := 0
	for _, m := range masks {
		if m.Len() == 1 {
			pinned++
		}
	}
	if len(cpus) > 1 && pinned < len(cpus) {
		t.Errorf("%d threads pinned to one cpu, want at least %d: %v", pinned, len(cpus), masks)
	}
}

// BenchmarkWorkersRun times Run with trivial work: the hand-off latency.
// Sub-benchmarks: workers pinned to the allowed CPUs or unpinned, and
// idle workers polling (SpinTime, used only while GOMAXPROCS leaves the
// caller a P) or blocking at once; BenchmarkWorkersRunLed after Lead.
func BenchmarkWorkersRun(b *testing.B) {
	cpus := allowedCPUs(b)
	for _, nw := range []int{1, len(cpus)} {
		for _, pinned := range []bool{true, false} {
			for _, spin := range []time.Duration{0, SpinTime} {
				name := fmt.Sprintf("workers=%d/pinned=%v/spin=%v", nw, pinned, spin)
				b.Run(name, func(b *testing.B) {
					defer func(old time.Duration) { SpinTime = old }(SpinTime)
					SpinTime = spin
					w := NewUnpinnedWorkers(nw)
					if pinned {
						var err error
						w.Close()
						if w, err = NewWorkers(cpus[:nw]); err != nil {
							b.Fatal(err)
						}
					}
					defer w.Close()
					task := &sumTask{work: make([]int64, w.Workers())}
					b.ReportAllocs()
					for b.Loop() {
						w.Run(64, task)
					}
				})
			}
		}
	}
}

// BenchmarkWorkersRunLed is BenchmarkWorkersRun's pinned, polling case
// after Lead: the caller computes chunk 0.
func BenchmarkWorkersRunLed(b *testing.B) {
	cpus := allowedCPUs(b)
	for _, nw := range []int{1, len(cpus)} {
		b.Run(fmt.Sprintf("workers=%d", nw), func(b *testing.B) {
			w, err := NewWorkers(cpus[:nw])
			if err != nil {
				b.Fatal(err)
			}
			if err := w.Lead(); err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			task := &sumTask{work: make([]int64, nw)}
			b.ReportAllocs()
			for b.Loop() {
				w.Run(64, task)
			}
		})
	}
}

// BenchmarkGoschedLocked is what Workers.yield costs a led Run: a Gosched
// of a goroutine locked to its thread, which hands its P to another thread
// and back (run under taskset -c 0 for a one-core rank).
func BenchmarkGoschedLocked(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for b.Loop() {
		runtime.Gosched()
	}
}

// BenchmarkFutexPingPong is the floor under BenchmarkWorkersRun: one futex
// round trip between the caller and a locked goroutine, as Run makes.
func BenchmarkFutexPingPong(b *testing.B) {
	var w atomic.Uint32
	done := make(chan bool)
	N := b.N
	go func() {
		runtime.LockOSThread()
		for i := 0; i < N; i++ {
			for w.Load() != uint32(2*i+1) {
				futexWait(&w, uint32(2*i))
			}
			w.Store(uint32(2*i + 2))
			futexWake(&w, 1)
		}
		done <- true
	}()
	b.ResetTimer()
	for i := 0; i < N; i++ {
		w.Store(uint32(2*i + 1))
		futexWake(&w, 1)
		for w.Load() != uint32(2*i+2) {
			futexWait(&w, uint32(2*i+1))
		}
	}
	<-done
}

func TestNewWorkersOutsideMask(t *testing.T) {
	mask, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	outside := NewCPUSet(MaxCPU - 1).Minus(mask).CPUs()
	if len(outside) == 0 {
		t.Skip("every cpu allowed")
	}
	if w, err := NewWorkers(append(mask.CPUs()[:1], outside...)); err == nil {
		w.Close()
		t.Fatal("NewWorkers on a cpu outside the mask gave no error")
	}
}

// TestWorkersLeadWhileSpinning: with Ps to spare the workers spin at
// start, reading whether the pool is led while Lead sets it; under the
// race detector (make test runs this package with -race) a plain bool
// there was a race.
func TestWorkersLeadWhileSpinning(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	for range 300 {
		w := NewUnpinnedWorkers(4)
		w.Lead()
		w.Run(8, nopTask{})
		w.Close()
	}
}
