package train

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"hpctrain/mpi"
)

// watchdog aborts the job when a collective has not completed within a
// timeout: a dead or stuck peer would otherwise hang every rank forever.
// Every collective the run makes goes through guard, so the watchdog covers
// start-up agreement, the parameter broadcast, resume, the gradient
// all-reduce, checksums, signal agreement and evaluation alike. It reports
// the collective, what the run was doing, the step, host, rank and cores,
// then calls abort (MPI_Abort of the whole job).
//
// The rank the others wait for is not in a collective, so it cannot time
// one out; but its watchdog sees how long it has gone without one. When
// that reaches the timeout (less a tick, so that the line comes before the
// waiting ranks' abort), it says so, once: a stuck kernel or a slow node
// names itself. It does not abort: a phase that is slow on every rank
// alike (a long evaluation) times out nothing.
//
// What no collective can time out is a batch stuck on every rank at once
// (a hung network file system under every rank's loader), or in a job of
// one rank: nobody waits. The step timeout covers those: a training step,
// or a batch of evaluation, that has gone stepTimeout without finishing
// or reaching a collective aborts the job, as a collective's timeout does;
// so does the data's load at start-up that has gone as long without
// reading a file (an image folder: an image).
// Its default (10 min) is twice the collective timeout's default, so that
// where a single rank is stuck its peers' timeout, which names that rank,
// comes first.
type watchdog struct {
	timeout     time.Duration // a collective's longest wait; 0: none
	stepTimeout time.Duration // a batch's longest stretch without a collective; 0: none
	peers       bool          // other ranks exist: a long stretch without a collective keeps them waiting
	since       atomic.Int64  // unix nanoseconds when the wait began; 0: not waiting
	busy        atomic.Int64  // unix nanoseconds of the last phase change or collective's end
	batch       atomic.Int64  // the same, or of the last evaluation batch's start or file loaded: the step timeout's
	step        atomic.Int64
	bucket      atomic.Int64           // gradient bucket waited on; -1: another collective
	op          atomic.Pointer[string] // the collective waited on
	phase       atomic.Pointer[string] // what the run is doing
	describe    atomic.Pointer[string] // "rank R on host H (cores C)"
	out         io.Writer
	abort       func(code int)
	first       atomic.Pointer[func()] // run before abort: ncclCommAbort (onAbort)
	stop        chan struct{}
	once        sync.Once

	now   func() time.Time // time.Now; tests give a clock of their own
	every time.Duration    // the tick
	// Owned by the ticking goroutine (check):
	last time.Time // when the last tick was handled
	told int64     // the quiet stretch already reported (its busy stamp)
}

// ExitWatchdog is the exit code of a job aborted by the watchdog.
const ExitWatchdog = 3

// The collectives and phases the watchdog names. They are variables so
// that the hot path stores a pointer and allocates nothing.
var (
	opGradients = "the gradient all-reduce"
	opNCCL      = "the NCCL gradient all-reduce"
	opAllreduce = "MPI_Allreduce"
	opBcast     = "MPI_Bcast"
	opAllgather = "MPI_Allgather"
	opBarrier   = "MPI_Barrier"
	opNodeMem   = "MPI_Win_allocate_shared"

	phaseStartup    = "start-up"
	phaseLoading    = "loading the data"
	phaseBroadcast  = "the initial parameter broadcast"
	phaseResume     = "resuming from a checkpoint"
	phaseTraining   = "training"
	phaseSignals    = "agreeing on signals"
	phaseChecksum   = "comparing parameter checksums (-check-every)"
	phaseCheckpoint = "writing a checkpoint"
	phaseEpochLoss  = "reducing the epoch's training loss"
	phaseEvaluation = "evaluation"
	phaseFinish     = "finishing"
)

// newWatchdog starts a watchdog with a collective timeout and a step
// timeout (0: none).
func newWatchdog(timeout, stepTimeout time.Duration, ranks int, describe string, out io.Writer, abort func(int)) *watchdog {
	w := makeWatchdog(timeout, stepTimeout, ranks, describe, out, abort, time.Now)
	if w.on() {
		go w.run()
	}
	return w
}

// makeWatchdog is newWatchdog on the clock now, with no goroutine ticking
// it: tests call check themselves.
func makeWatchdog(timeout, stepTimeout time.Duration, ranks int, describe string, out io.Writer, abort func(int), now func() time.Time) *watchdog {
	w := &watchdog{timeout: timeout, stepTimeout: stepTimeout, peers: ranks > 1, out: out, abort: abort, stop: make(chan struct{}), now: now}
	w.describe.Store(&describe)
	w.phase.Store(&phaseStartup)
	// A quarter of the shorter timeout, at most a second.
	w.every = time.Second
	for _, d := range []time.Duration{timeout, stepTimeout} {
		if d > 0 {
			w.every = min(w.every, d/4)
		}
	}
	w.last = now()
	w.busy.Store(w.last.UnixNano())
	w.batch.Store(w.last.UnixNano())
	return w
}

// on reports whether the watchdog times anything.
func (w *watchdog) on() bool {
	return w != nil && (w.timeout > 0 || w.stepTimeout > 0)
}

// setDescribe replaces how the rank is named (once its cores are known).
func (w *watchdog) setDescribe(d string) {
	if w != nil {
		w.describe.Store(&d)
	}
}

// setPhase records what the run is doing, for the report.
func (w *watchdog) setPhase(p *string, step int) {
	if w == nil {
		return
	}
	w.phase.Store(p)
	w.step.Store(int64(step))
	if w.on() {
		t := w.now().UnixNano()
		w.busy.Store(t)
		w.batch.Store(t)
	}
}

// batchBegins records that a batch of evaluation begins, or that the
// load read a file, for the step timeout. The evaluation's batches (the
// load's files) are one stretch without a collective for the held-up
// report: a rank slow over the whole evaluation still names itself.
func (w *watchdog) batchBegins() {
	if w.on() {
		w.batch.Store(w.now().UnixNano())
	}
}

// enter starts timing a wait for op (bucket >= 0: that gradient bucket).
func (w *watchdog) enter(op *string, step, bucket int) {
	if !w.on() {
		return
	}
	w.op.Store(op)
	if step >= 0 {
		w.step.Store(int64(step))
	}
	w.bucket.Store(int64(bucket))
	w.since.Store(w.now().UnixNano())
}

func (w *watchdog) leave() {
	if !w.on() {
		return
	}
	// busy first: a tick that sees since at 0 must not see the stamp
	// from before this collective, as if the wait had been work.
	t := w.now().UnixNano()
	w.busy.Store(t)
	w.batch.Store(t)
	w.since.Store(0)
}

// message is the report for a wait that began at since.
func (w *watchdog) message() string {
	what := *w.op.Load()
	if b := w.bucket.Load(); b >= 0 {
		what = fmt.Sprintf("%s (bucket %d)", what, b)
	}
	return fmt.Sprintf("hpctrain: %s: collective timeout: %s during %s waited %v; a peer is dead or stuck; aborting the job (raise -collective-timeout if this part of the run is this slow)",
		*w.describe.Load(), what, w.where(), w.timeout)
}

// where is what the run is doing, with its step.
func (w *watchdog) where() string {
	// The step is the run's count of steps taken: during a step (its
	// passes and all-reduce, or its checksum) the one in progress is the
	// next, numbered from 1 as every other message numbers it.
	where := *w.phase.Load()
	switch p, step := w.phase.Load(), w.step.Load(); {
	case p == &phaseTraining || p == &phaseChecksum:
		where += fmt.Sprintf(" at step %d", step+1)
	case step > 0:
		where += fmt.Sprintf(" after step %d", step)
	}
	return where
}

// held is the report of a rank that has gone quiet without a collective
// since busy: the one its peers wait for, if they do.
func (w *watchdog) held(quiet time.Duration) string {
	return fmt.Sprintf("hpctrain: %s: no collective for %v, in %s; a rank waiting for this one aborts the job at -collective-timeout %v: if the job ends so, this rank held it up",
		*w.describe.Load(), quiet.Round(time.Millisecond), w.where(), w.timeout)
}

// stuck is the report of a batch (a training step, or one of evaluation)
// that has gone the step timeout without finishing or reaching a
// collective, or of a load that has gone as long without reading a file.
func (w *watchdog) stuck() string {
	if w.phase.Load() == &phaseLoading {
		return fmt.Sprintf("hpctrain: %s: step timeout: %s has gone %v without reading a file (an image of a folder); its reads are stuck; aborting the job (raise -step-timeout if one file can take this long; 0: never)",
			*w.describe.Load(), w.where(), w.stepTimeout)
	}
	return fmt.Sprintf("hpctrain: %s: step timeout: %s has gone %v without finishing its batch or reaching a collective (reading the batch, or the passes over it, are stuck); aborting the job (raise -step-timeout if a batch can take this long; 0: never)",
		*w.describe.Load(), w.where(), w.stepTimeout)
}

// timesBatches reports whether phase p goes batch by batch (file by file),
// each timed by the step timeout.
func timesBatches(p *string) bool {
	return p == &phaseTraining || p == &phaseEvaluation || p == &phaseLoading
}

func (w *watchdog) run() {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
			// The time the tick is handled, not the one it carries: the
			// first tick after a stop carries the time it was due.
			if w.check(w.now()) {
				return
			}
		}
	}
}

// check is one tick at time now: it reports a rank holding its peers up,
// and aborts the job (returning true) when a collective has waited the
// timeout or a batch has gone the step timeout without one.
func (w *watchdog) check(now time.Time) bool {
	// A tick long overdue means this process did not run: it was stopped
	// (SLURM's scontrol suspend, SIGSTOP) or its machine paused. That time
	// is nobody's wait: the ranks were suspended together, and a job
	// resumed mid-collective must not be aborted for it. Only stamps from
	// before the stop move: the stop began at most a tick after the last
	// tick, and ended at least gap after it, so a stamp taken since the
	// resume (a collective entered before this late tick) keeps its time.
	if gap := now.Sub(w.last) - w.every; gap > w.every {
		cut := w.last.Add((w.every + gap) / 2).UnixNano()
		later(&w.since, gap, cut)
		later(&w.batch, gap, cut)
		if old, moved := later(&w.busy, gap, cut); moved && old == w.told {
			w.told += int64(gap) // the same quiet stretch: told once
		}
	}
	w.last = now
	s := w.since.Load()
	if s == 0 {
		if w.stepTimeout > 0 && now.Sub(time.Unix(0, w.batch.Load())) >= w.stepTimeout && timesBatches(w.phase.Load()) {
			w.abortWith(w.stuck())
			return true
		}
		b := w.busy.Load()
		quiet := now.Sub(time.Unix(0, b))
		// A waiting peer times out at its first tick past the timeout,
		// after this rank's busy stamp: a tick early, this line comes
		// first.
		if w.timeout > 0 && w.peers && b != w.told && quiet >= w.timeout-w.every {
			fmt.Fprintln(w.out, w.held(quiet))
			w.told = b
		}
		return false
	}
	if w.timeout <= 0 || now.Sub(time.Unix(0, s)) < w.timeout {
		return false
	}
	w.abortWith(w.message())
	return true
}

// abortWith prints line and aborts the job.
func (w *watchdog) abortWith(line string) {
	fmt.Fprintln(w.out, line)
	if f := w.first.Load(); f != nil {
		(*f)() // a communicator outside MPI (NCCL) is aborted first
	}
	w.abort(ExitWatchdog)
}

// later moves a stamp (unix nanoseconds; 0: none) taken before cut later
// by d, unless the run has just replaced it; it returns the stamp it saw
// and whether it moved it.
func later(a *atomic.Int64, d time.Duration, cut int64) (int64, bool) {
	s := a.Load()
	return s, s != 0 && s < cut && a.CompareAndSwap(s, s+int64(d))
}

// onAbort makes a timeout call f before it aborts the job: NCCL's
// ncclCommAbort, so that the device's pending work is cancelled.
func (w *watchdog) onAbort(f func()) {
	if w != nil {
		w.first.Store(&f)
	}
}

func (w *watchdog) close() {
	if w != nil {
		w.once.Do(func() { close(w.stop) })
	}
}

// guarded is a communicator whose blocking collectives are timed by a
// watchdog. The run hands it to everything it calls, so no collective can
// escape the timeout. Non-blocking calls are timed where they are waited
// for (buckets.wait).
type guarded struct {
	mpi.Comm
	wd *watchdog
}

func guard(c mpi.Comm, wd *watchdog) mpi.Comm { return guarded{c, wd} }

func (g guarded) AllreduceSum(buf []float32) error {
	g.wd.enter(&opAllreduce, -1, -1)
	defer g.wd.leave()
	return g.Comm.AllreduceSum(buf)
}

func (g guarded) NodeBuffer(n int) ([]float32, error) {
	g.wd.enter(&opNodeMem, -1, -1)
	defer g.wd.leave()
	return g.Comm.NodeBuffer(n)
}

func (g guarded) AllreduceSum64(buf []float64) error {
	g.wd.enter(&opAllreduce, -1, -1)
	defer g.wd.leave()
	return g.Comm.AllreduceSum64(buf)
}

func (g guarded) Bcast(buf []float32, root int) error {
	g.wd.enter(&opBcast, -1, -1)
	defer g.wd.leave()
	return g.Comm.Bcast(buf, root)
}

func (g guarded) BcastBytes(buf []byte, root int) error {
	g.wd.enter(&opBcast, -1, -1)
	defer g.wd.leave()
	return g.Comm.BcastBytes(buf, root)
}

func (g guarded) Allgather(send, recv []byte) error {
	g.wd.enter(&opAllgather, -1, -1)
	defer g.wd.leave()
	return g.Comm.Allgather(send, recv)
}

func (g guarded) Barrier() error {
	g.wd.enter(&opBarrier, -1, -1)
	defer g.wd.leave()
	return g.Comm.Barrier()
}
