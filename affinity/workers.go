package affinity

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Task is work over items [0, n) that Workers.Run splits into chunks:
// Run(w, lo, hi) handles items [lo, hi) on worker w. It is the same
// interface as hpctrain/model.Task; pass a pointer to a struct so that
// Workers.Run allocates nothing.
type Task = interface {
	Run(w, lo, hi int)
}

// Workers is a fixed team of goroutines, each locked to its own OS thread
// and, when made by NewWorkers, that thread pinned to one CPU. It
// satisfies hpctrain/model.Parallel. Run is not safe for concurrent use
// and must not be called from inside a Task.
//
// Hand-offs go through futex(2) on words in the Workers, not through
// channels: a goroutine locked to its thread that blocks on a channel is
// woken by the Go scheduler handing a P from thread to thread, which cost
// about 35µs per Run on two workers; a thread blocked in futex is woken by
// the kernel directly and keeps its P, so a Run costs a few µs.
//
// After Lead, the goroutine that calls Run is worker 0 itself (OpenMP's
// model, where the master thread takes a share): no hand-off at all for
// one worker, one fewer for more.
type Workers struct {
	cpus  []int  // cpus[i] is worker i's CPU; nil when unpinned
	slots []slot // one per worker
	exit  sync.WaitGroup

	gen      atomic.Uint32 // bumped after each batch of posts; workers futex-wait on it
	sleepers atomic.Int32  // workers in (or about to enter) futex wait on gen
	left     atomic.Uint32 // chunks of the current Run not yet done; Run futex-waits on it
	waiting  atomic.Bool   // the leader is (about to be) asleep on left
	quit     atomic.Bool
	closed   bool

	led     atomic.Bool   // Lead was called: the caller is worker 0 (read by the workers too)
	yielded time.Duration // when Run last yielded the caller's P (since yieldEpoch)
	oldMask CPUSet        // the leader thread's mask before Lead, restored by Close
	gone0   chan struct{} // closed when worker 0's goroutine has returned
}

// slot is one worker's mailbox, on a cache line of its own.
type slot struct {
	seq    atomic.Uint32 // bumped by Run for each chunk it posts here
	stop   atomic.Bool   // the worker returns at its next look (Lead, for worker 0)
	task   Task          // the chunk, valid once seq has moved
	lo, hi int
	_      [64]byte
}

// NewWorkers starts len(cpus) workers; worker i locks its goroutine to an
// OS thread and pins that thread to cpus[i] (sched_setaffinity on the
// thread). The CPUs must be in the process's mask. With cpus nil it is
// NewUnpinnedWorkers(runtime.GOMAXPROCS(0)).
func NewWorkers(cpus []int) (*Workers, error) {
	if cpus == nil {
		return NewUnpinnedWorkers(runtime.GOMAXPROCS(0)), nil
	}
	if len(cpus) == 0 {
		panic("affinity: NewWorkers with no cpus")
	}
	w := &Workers{cpus: append([]int(nil), cpus...)}
	if err := w.start(len(cpus)); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// NewUnpinnedWorkers starts n workers, each locked to its own OS thread
// but free to run on any CPU of the process's mask.
func NewUnpinnedWorkers(n int) *Workers {
	if n < 1 {
		panic("affinity: NewUnpinnedWorkers with fewer than 1 worker")
	}
	w := &Workers{}
	if err := w.start(n); err != nil {
		panic("affinity: unpinned worker failed to start") // start fails only when pinning
	}
	return w
}

func (w *Workers) start(n int) error {
	w.slots = make([]slot, n)
	w.gone0 = make(chan struct{})
	errs := make(chan error, n)
	w.exit.Add(n)
	for i := range w.slots {
		go w.loop(i, errs)
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// loop is worker i. It never unlocks its thread, so when it returns the
// runtime ends the thread instead of reusing it, one-CPU mask and all,
// for other goroutines.
func (w *Workers) loop(i int, errs chan<- error) {
	runtime.LockOSThread()
	defer w.exit.Done()
	if i == 0 {
		defer close(w.gone0)
	}
	if w.cpus != nil {
		if err := setThread(0, NewCPUSet(w.cpus[i])); err != nil {
			errs <- fmt.Errorf("pin worker %d to cpu %d: %w", i, w.cpus[i], err)
			return
		}
	}
	errs <- nil
	s := &w.slots[i]
	var seen uint32
	for {
		w.spin(s, seen)
		for s.seq.Load() == seen {
			// Announce the sleep, then look again: Run posts, bumps gen,
			// then reads sleepers, so either it wakes us or we see gen move.
			w.sleepers.Add(1)
			g := w.gen.Load()
			if s.seq.Load() == seen {
				futexWait(&w.gen, g)
			}
			w.sleepers.Add(-1)
		}
		seen = s.seq.Load()
		if w.quit.Load() || s.stop.Load() {
			return
		}
		s.task.Run(i, s.lo, s.hi)
		s.task = nil
		if w.left.Add(^uint32(0)) == 0 && (!w.led.Load() || w.waiting.Load()) {
			futexWake(&w.left, 1)
		}
	}
}

// Lead makes the calling goroutine worker 0 until Close: it locks the
// goroutine to its OS thread, pins that thread to worker 0's CPU (for
// pinned Workers), and ends worker 0's own goroutine. From then on Run
// must be called from this goroutine only, and so must Close, which
// gives the thread back its former mask and unlocks it. Run then computes
// chunk 0 itself and hands off only chunks 1 to W-1: a rank with one
// compute thread makes no hand-off at all, where each Run otherwise cost
// a futex wake-up and, on a rank's single core, a switch between the
// caller's thread and the worker's.
func (w *Workers) Lead() error {
	if w.closed {
		panic("affinity: Lead on closed Workers")
	}
	if w.led.Load() {
		return nil
	}
	runtime.LockOSThread()
	if w.cpus != nil {
		old, err := Allowed() // the calling thread's mask
		if err == nil {
			err = setThread(0, NewCPUSet(w.cpus[0]))
		}
		if err != nil {
			runtime.UnlockOSThread()
			return fmt.Errorf("pin the leading thread to cpu %d: %w", w.cpus[0], err)
		}
		w.oldMask = old
	}
	s := &w.slots[0]
	s.stop.Store(true)
	s.seq.Add(1)
	w.wakeAll()
	<-w.gone0
	w.led.Store(true)
	return nil
}

// Workers returns the number of workers.
func (w *Workers) Workers() int { return len(w.slots) }

// CPU returns the CPU worker i is pinned to, or -1 for unpinned workers.
func (w *Workers) CPU(i int) int {
	if i < 0 || i >= len(w.slots) {
		panic("affinity: worker index out of range")
	}
	if w.cpus == nil {
		return -1
	}
	return w.cpus[i]
}

// yieldEvery is how often, at most, Run lets the caller's goroutine be
// rescheduled: well under the 10 ms after which Go's sysmon forcibly
// preempts a goroutine (see yield), allowing for the C calls and waits
// between two Runs.
const yieldEvery = 4 * time.Millisecond

var yieldEpoch = time.Now()

// gosched is runtime.Gosched, a variable so that a test can tell a yield
// from Go's own preemption.
var gosched = runtime.Gosched

// yield calls runtime.Gosched when Run has not done so for yieldEvery.
//
// A training goroutine runs for the whole job without blocking in Go:
// its time goes to C calls (oneDNN, the kernels) and to waits that spin
// or sleep in the kernel. Go's sysmon treats a goroutine that has held its
// P for 10 ms as one to preempt; inside a C call it cannot be, so sysmon
// takes its P instead, and from then on it keeps polling every 20 µs and
// taking the P of C calls. On a rank's own core each poll preempts the
// compute thread: 2 ranks x 1 thread training the reference CNN made
// 1,950 sysmon passes and 310-390 forced preemptions a second, and 5,300
// context switches. A reschedule every few milliseconds restarts the
// goroutine's time slice: 100 sysmon passes, no preemption, 1,300
// switches, and about 7% more samples/s. A Gosched of a goroutine locked
// to its thread (Lead) hands the P to another thread and back: 5.5-7 µs
// where the process has one core, 16-32 µs where it has two
// (BenchmarkGoschedLocked), hence not on every Run.
func (w *Workers) yield() {
	if now := time.Since(yieldEpoch); now-w.yielded >= yieldEvery {
		gosched()
		w.yielded = time.Since(yieldEpoch)
	}
}

// Run splits [0, n) into Workers() contiguous chunks of near-equal size,
// worker i taking [n*i/W, n*(i+1)/W) (empty chunks are skipped), and
// returns when every chunk is done. The calling goroutine only waits: it
// is not pinned, so it does no share of the work. Run allocates nothing.
func (w *Workers) Run(n int, t Task) {
	if w.closed {
		panic("affinity: Run on closed Workers")
	}
	if n < 0 {
		panic("affinity: Run with negative item count")
	}
	w.yield()
	nw := len(w.slots)
	chunks := int64(min(n, nw))
	if chunks == 0 {
		return
	}
	first := 0
	if w.led.Load() {
		first = 1
		if n/nw > 0 { // chunk 0 is not empty: it is the leader's
			chunks--
		}
	}
	w.left.Store(uint32(chunks))
	for i := first; i < nw; i++ {
		lo, hi := n*i/nw, n*(i+1)/nw
		if lo == hi {
			continue
		}
		s := &w.slots[i]
		s.task, s.lo, s.hi = t, lo, hi
		s.seq.Add(1)
	}
	if chunks > 0 {
		w.wakeAll()
	}
	if w.led.Load() {
		if hi := n / nw; hi > 0 {
			t.Run(0, 0, hi)
		}
		w.waitLed()
		return
	}
	for {
		v := w.left.Load()
		if v == 0 {
			return
		}
		futexWait(&w.left, v)
	}
}

// waitLed is the leader's wait for the other workers' chunks: it polls
// for up to SpinTime, as the others finish about when it does, and only
// then sleeps (a wake-up costs tens of µs on a VM). Pinned, it polls on
// its own core, so it takes nothing from the workers.
func (w *Workers) waitLed() {
	if w.left.Load() == 0 {
		return
	}
	if w.cpus == nil { // unpinned: a worker may need this very core
		w.sleepLed()
		return
	}
	deadline := time.Now().Add(SpinTime)
	for k := 1; w.left.Load() != 0; k++ {
		if k%256 == 0 && time.Now().After(deadline) {
			break
		}
	}
	w.sleepLed()
}

// sleepLed blocks the leader until left is 0.
func (w *Workers) sleepLed() {
	for {
		w.waiting.Store(true)
		v := w.left.Load()
		if v == 0 {
			w.waiting.Store(false)
			return
		}
		futexWait(&w.left, v)
		w.waiting.Store(false)
	}
}

// SpinTime is how long an idle worker polls its slot before it blocks in
// futex(2). Polling keeps the worker's CPU awake, so that the next Run is
// picked up in well under a microsecond; a blocked worker is woken by the
// kernel, which on a virtual machine whose idle vCPU has halted took about
// 30µs (see BenchmarkWorkersRun). Polling holds a P, so workers poll only
// while GOMAXPROCS leaves a P for the goroutine that calls Run (more Ps
// than workers; after Lead that goroutine is worker 0 and holds its own);
// otherwise that goroutine would wait for a worker to stop polling before
// it could run again.
var SpinTime = 50 * time.Microsecond

// spin polls s until its seq moves past seen or SpinTime passes.
func (w *Workers) spin(s *slot, seen uint32) {
	need := len(w.slots) + 1
	if w.led.Load() {
		need--
	}
	if SpinTime <= 0 || runtime.GOMAXPROCS(0) < need {
		return
	}
	deadline := time.Now().Add(SpinTime)
	for k := 1; s.seq.Load() == seen; k++ {
		if k%256 == 0 && time.Now().After(deadline) {
			return
		}
	}
}

// wakeAll makes workers look at their slots again.
func (w *Workers) wakeAll() {
	w.gen.Add(1)
	if w.sleepers.Load() > 0 {
		futexWake(&w.gen, len(w.slots))
	}
}

// Close stops the workers and waits for them to exit; their threads end
// with them. After Lead, call it from the leading goroutine.
func (w *Workers) Close() {
	if w.closed {
		return
	}
	w.closed = true
	w.quit.Store(true)
	for i := range w.slots {
		w.slots[i].seq.Add(1)
	}
	w.wakeAll()
	w.exit.Wait()
	if w.led.Load() {
		if w.cpus != nil {
			setThread(0, w.oldMask) // the mask it had: best effort, as the thread goes on
		}
		runtime.UnlockOSThread()
	}
}
