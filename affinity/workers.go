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
type Workers struct {
	cpus  []int  // cpus[i] is worker i's CPU; nil when unpinned
	slots []slot // one per worker
	exit  sync.WaitGroup

	gen      atomic.Uint32 // bumped after each batch of posts; workers futex-wait on it
	sleepers atomic.Int32  // workers in (or about to enter) futex wait on gen
	left     atomic.Uint32 // chunks of the current Run not yet done; Run futex-waits on it
	quit     atomic.Bool
	closed   bool
}

// slot is one worker's mailbox, on a cache line of its own.
type slot struct {
	seq    atomic.Uint32 // bumped by Run for each chunk it posts here
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
		if w.quit.Load() {
			return
		}
		s.task.Run(i, s.lo, s.hi)
		s.task = nil
		if w.left.Add(^uint32(0)) == 0 {
			futexWake(&w.left, 1)
		}
	}
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
	nw := len(w.slots)
	chunks := int64(min(n, nw))
	if chunks == 0 {
		return
	}
	w.left.Store(uint32(chunks))
	for i := range w.slots {
		lo, hi := n*i/nw, n*(i+1)/nw
		if lo == hi {
			continue
		}
		s := &w.slots[i]
		s.task, s.lo, s.hi = t, lo, hi
		s.seq.Add(1)
	}
	w.wakeAll()
	for {
		v := w.left.Load()
		if v == 0 {
			return
		}
		futexWait(&w.left, v)
	}
}

// SpinTime is how long an idle worker polls its slot before it blocks in
// futex(2). Polling keeps the worker's CPU awake, so that the next Run is
// picked up in well under a microsecond; a blocked worker is woken by the
// kernel, which on a virtual machine whose idle vCPU has halted took about
// 30µs (see BenchmarkWorkersRun). Polling holds a P, so workers poll only
// while GOMAXPROCS exceeds the number of workers, leaving a P for the
// goroutine that calls Run; otherwise that goroutine would wait for a
// worker to stop polling before it could run again.
var SpinTime = 50 * time.Microsecond

// spin polls s until its seq moves past seen or SpinTime passes.
func (w *Workers) spin(s *slot, seen uint32) {
	if SpinTime <= 0 || runtime.GOMAXPROCS(0) <= len(w.slots) {
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
// with them.
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
}
