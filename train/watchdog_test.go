package train

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hpctrain/internal/mpitest"
)

// TestWatchdogStep: the watchdog numbers steps as every other message
// does: the step in progress from 1 during a step (it said step 1 where
// the failing rank said step 2), the steps taken between steps, and none
// before the first.
func TestWatchdogStep(t *testing.T) {
	w := newWatchdog(0, 0, 2, "rank 0 on host h", io.Discard, func(int) {})
	w.timeout = 3 * time.Second // the message only; no ticker runs
	for _, c := range []struct {
		phase *string
		step  int
		op    *string
		want  string
	}{
		{&phaseStartup, 0, &opAllgather, "MPI_Allgather during start-up waited 3s"},
		{&phaseTraining, 1, &opGradients, "during training at step 2 waited 3s"},
		{&phaseChecksum, 4, &opAllgather, "during comparing parameter checksums (-check-every) at step 5 waited"},
		{&phaseSignals, 5, &opAllreduce, "MPI_Allreduce during agreeing on signals after step 5 waited"},
		{&phaseEvaluation, 20, &opAllreduce, "during evaluation after step 20 waited"},
	} {
		w.setPhase(c.phase, c.step)
		w.op.Store(c.op)
		w.bucket.Store(-1)
		if m := w.message(); !strings.Contains(m, c.want) {
			t.Errorf("%s, step %d: %q, want %q", *c.phase, c.step, m, c.want)
		}
	}
}

// fakeClock is a watchdog's clock that a test moves by hand, in
// milliseconds from an hour after the Unix epoch (a stamp of 0 means
// none).
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() time.Time {
	return time.Unix(3600, c.ms.Load()*int64(time.Millisecond))
}

// at sets the clock to ms milliseconds after its start.
func (c *fakeClock) at(ms int) time.Time {
	c.ms.Store(int64(ms))
	return c.now()
}

// fakeWatchdog is a watchdog with a timeout of 400 ms (ticks every 100
// ms) on a clock at 0 that the test moves and ticks (check) by hand.
func fakeWatchdog(t *testing.T, ranks int) (*watchdog, *fakeClock, *mpitest.Buffer, *atomic.Int64) {
	var c fakeClock
	var out mpitest.Buffer
	var abortedAt atomic.Int64
	abortedAt.Store(-1)
	w := makeWatchdog(400*time.Millisecond, 0, ranks, "rank 1 on host h", &out, func(int) { abortedAt.Store(c.ms.Load()) }, c.now)
	return w, &c, &out, &abortedAt
}

// TestWatchdogHeld: a rank that goes the timeout (less a tick) without a
// collective says so once per quiet stretch; time spent waiting in a
// collective is not quiet, and a job of one rank, which nobody waits for,
// never says it.
func TestWatchdogHeld(t *testing.T) {
	w, c, out, aborted := fakeWatchdog(t, 2)
	w.setPhase(&phaseTraining, 6)
	w.enter(&opGradients, 6, 0)
	ms := 0
	tick := func(to int) { // ticks every 100 ms up to the clock at to
		for ms += 100; ms <= to; ms += 100 {
			w.check(c.at(ms))
		}
		ms -= 100
	}
	tick(300) // a slow all-reduce, within the timeout
	c.at(350)
	w.leave()
	tick(600)
	if s := out.String(); s != "" {
		t.Fatalf("250 ms after a collective: %q, want nothing", s)
	}
	tick(700) // 350 ms quiet: the timeout less a tick
	want := "hpctrain: rank 1 on host h: no collective for 350ms, in training at step 7; a rank waiting for this one aborts the job at -collective-timeout 400ms"
	if s := out.String(); strings.Count(s, "no collective") != 1 || !strings.Contains(s, want) {
		t.Fatalf("350 ms without a collective: %q, want one line %q", s, want)
	}
	tick(2000)
	if s := out.String(); strings.Count(s, "no collective") != 1 {
		t.Fatalf("the same stretch again: %q, want it told once", s)
	}
	c.at(2050)
	w.setPhase(&phaseEvaluation, 7) // a new stretch
	tick(2400)
	if s := out.String(); strings.Count(s, "no collective") != 2 || !strings.Contains(s, "no collective for 350ms, in evaluation after step 7") {
		t.Fatalf("a second stretch: %q, want a second line", s)
	}
	if a := aborted.Load(); a >= 0 {
		t.Errorf("aborted at %d ms with no collective waiting", a)
	}

	w, c, out, _ = fakeWatchdog(t, 1)
	ms = 0
	w.setPhase(&phaseTraining, 1)
	tick(2000)
	if s := out.String(); s != "" {
		t.Errorf("one rank: %q, want nothing", s)
	}
}

// TestWatchdogStopped: a tick long overdue (the process was stopped)
// moves the stamps taken before the stop by the time stopped, and only
// those: a wait begun before the stop counts its time before and after,
// one begun after the resume (before the late tick) counts from its start,
// and a quiet stretch already told is not told again.
func TestWatchdogStopped(t *testing.T) {
	// Stopped from 150 ms to 3,150; the late tick at 3,170.
	w, c, _, aborted := fakeWatchdog(t, 2)
	w.check(c.at(100))
	c.at(3160)
	w.enter(&opGradients, 4, 0) // entered after the resume
	for ms := 3170; ms <= 4000 && aborted.Load() < 0; ms += 100 {
		w.check(c.at(ms))
	}
	if a := aborted.Load(); a != 3570 {
		t.Errorf("a wait entered at 3,160 ms, 10 ms after a 3 s stop: aborted at %d ms, want 3,570 (the timeout after it began)", a)
	}

	w, c, _, aborted = fakeWatchdog(t, 2)
	c.at(50)
	w.enter(&opGradients, 4, 0) // 100 ms of waiting before the stop
	w.check(c.at(100))
	for ms := 3100; ms <= 4000 && aborted.Load() < 0; ms += 100 {
		w.check(c.at(ms))
	}
	if a := aborted.Load(); a != 3400 {
		t.Errorf("a wait entered at 50 ms, then a 2.9 s stop: aborted at %d ms, want 3,400 (400 ms of waiting, the stop left out)", a)
	}

	w, c, out, _ := fakeWatchdog(t, 2)
	for ms := 100; ms <= 300; ms += 100 {
		w.check(c.at(ms))
	}
	w.check(c.at(3300)) // stopped after the line at 300 ms
	w.check(c.at(3400))
	if s := out.String(); strings.Count(s, "no collective") != 1 {
		t.Errorf("a quiet stretch, told, then a stop: %q, want it told once", s)
	}
}

// TestWatchdogStepTimeout: a training step, or a batch of evaluation, that
// goes the step timeout without finishing or reaching a collective aborts
// the job (exit 3) with a line naming it, also with the collective timeout
// off and in a job of one rank, and so does a load at start-up that goes
// as long without reading a file; time in a collective, other phases,
// batches that each finish in time, and a stopped process do not count,
// and 0 is never.
func TestWatchdogStepTimeout(t *testing.T) {
	fake := func(timeout, stepTimeout time.Duration, ranks int) (*watchdog, *fakeClock, *mpitest.Buffer, *atomic.Int64, *atomic.Int64) {
		var c fakeClock
		var out mpitest.Buffer
		var abortedAt, code atomic.Int64
		abortedAt.Store(-1)
		w := makeWatchdog(timeout, stepTimeout, ranks, "rank 0 on host h", &out, func(c2 int) { code.Store(int64(c2)); abortedAt.Store(c.ms.Load()) }, c.now)
		return w, &c, &out, &abortedAt, &code
	}
	// ticks every 100 ms from the clock's time after from up to to, or
	// until the watchdog aborts.
	tick := func(w *watchdog, c *fakeClock, from, to int) {
		for ms := from + 100; ms <= to; ms += 100 {
			if w.check(c.at(ms)) {
				return
			}
		}
	}

	w, c, out, aborted, code := fake(0, 400*time.Millisecond, 1)
	if w.every != 100*time.Millisecond {
		t.Fatalf("tick %v with the step timeout alone at 400ms, want 100ms", w.every)
	}
	w.setPhase(&phaseTraining, 2)
	tick(w, c, 0, 1000)
	want := "hpctrain: rank 0 on host h: step timeout: training at step 3 has gone 400ms without finishing its batch or reaching a collective"
	if a := aborted.Load(); a != 400 || code.Load() != ExitWatchdog || !strings.Contains(out.String(), want) {
		t.Fatalf("a stuck step, one rank, no collective timeout: aborted at %d ms with code %d, %q; want 400 ms, code %d, %q", a, code.Load(), out.String(), ExitWatchdog, want)
	}

	// A collective within the step starts the stretch again; the wait in
	// it is not the step's (the collective timeout, here none, governs).
	w, c, out, aborted, _ = fake(0, 400*time.Millisecond, 2)
	w.setPhase(&phaseTraining, 5)
	c.at(300)
	w.enter(&opGradients, 5, 0)
	tick(w, c, 300, 2000)
	w.leave()
	tick(w, c, 2000, 3000)
	if a := aborted.Load(); a != 2400 {
		t.Errorf("300 ms of step, a 1.7 s all-reduce, then stuck: aborted at %d ms, want 2,400 (%q)", a, out.String())
	}

	// Steps, and batches of evaluation, that each finish in time; phases
	// that are not batches (a checkpoint), however long; then a stuck
	// batch of evaluation.
	w, c, out, aborted, _ = fake(0, 400*time.Millisecond, 2)
	for ms := 0; ms < 3000; ms += 300 {
		w.setPhase(&phaseTraining, ms/300)
		tick(w, c, ms, ms+300)
	}
	w.setPhase(&phaseEvaluation, 10)
	for ms := 3000; ms < 6000; ms += 300 {
		w.batchBegins()
		tick(w, c, ms, ms+300)
	}
	w.setPhase(&phaseCheckpoint, 10)
	tick(w, c, 6000, 9000)
	if a := aborted.Load(); a >= 0 {
		t.Errorf("steps and evaluation batches of 300 ms, then a 3 s checkpoint: aborted at %d ms (%q)", a, out.String())
	}
	w.setPhase(&phaseEvaluation, 10)
	tick(w, c, 9000, 10000)
	if a := aborted.Load(); a != 9400 || !strings.Contains(out.String(), "step timeout: evaluation after step 10 has gone 400ms without finishing its batch") {
		t.Errorf("a stuck batch of evaluation from 9,000 ms: aborted at %d ms, %q; want 9,400 ms and the line", a, out.String())
	}

	// With a collective timeout as well: the rank says first that it
	// holds its peers up, then its step times out.
	w, c, out, aborted, _ = fake(400*time.Millisecond, 800*time.Millisecond, 2)
	w.setPhase(&phaseTraining, 0)
	tick(w, c, 0, 2000)
	if s := out.String(); aborted.Load() != 800 || strings.Count(s, "no collective for") != 1 || !strings.Contains(s, "step timeout: training at step 1 has gone 800ms") ||
		strings.Index(s, "no collective for") > strings.Index(s, "step timeout") {
		t.Errorf("collective timeout 400 ms, step timeout 800 ms: aborted at %d ms, %q; want the held line, then the step timeout at 800 ms", aborted.Load(), s)
	}

	// An evaluation slow as a whole, its batches each quick: no step
	// timeout, but the rank still says it holds its peers up.
	w, c, out, aborted, _ = fake(400*time.Millisecond, 250*time.Millisecond, 2)
	w.setPhase(&phaseEvaluation, 4)
	for ms := 0; ms < 1000; ms += 100 {
		w.batchBegins()
		tick(w, c, ms, ms+100)
	}
	if s := out.String(); aborted.Load() >= 0 || strings.Count(s, "no collective for") != 1 || !strings.Contains(s, "in evaluation after step 4") {
		t.Errorf("batches of 100 ms over a 1 s evaluation: aborted at %d ms, %q; want no abort and one held line", aborted.Load(), s)
	}

	// The data's load at start-up, file by file: quick files, then a
	// stuck read.
	w, c, out, aborted, _ = fake(0, 400*time.Millisecond, 2)
	w.setPhase(&phaseLoading, 0)
	for ms := 0; ms < 3000; ms += 300 {
		w.batchBegins()
		tick(w, c, ms, ms+300)
	}
	tick(w, c, 3000, 4000)
	if a := aborted.Load(); a != 3100 || !strings.Contains(out.String(), "step timeout: loading the data has gone 400ms without reading a file") {
		t.Errorf("a load reading a file every 300 ms, then stuck from 2,700 ms: aborted at %d ms, %q; want 3,100 ms and the line", a, out.String())
	}

	// A stopped process (a late tick): the time stopped is nobody's.
	w, c, _, aborted, _ = fake(0, 400*time.Millisecond, 2)
	w.setPhase(&phaseTraining, 1)
	w.check(c.at(100))
	tick(w, c, 3100, 3300)
	if a := aborted.Load(); a >= 0 {
		t.Errorf("100 ms into a step, stopped 3 s: aborted at %d ms", a)
	}
	tick(w, c, 3300, 4000)
	if a := aborted.Load(); a != 3400 {
		t.Errorf("100 ms into a step, stopped 3 s, then stuck: aborted at %d ms, want 3,400", a)
	}

	// 0: never.
	w, c, _, aborted, _ = fake(400*time.Millisecond, 0, 1)
	w.setPhase(&phaseTraining, 1)
	tick(w, c, 0, 5000)
	if a := aborted.Load(); a >= 0 {
		t.Errorf("step timeout 0: aborted at %d ms", a)
	}
}

// TestWatchdogSuspended: a job suspended mid-collective (every rank
// stopped, as scontrol suspend does) for longer than the timeout is not
// aborted when it resumes; the wait goes on counting from there. The
// real signals and clock; a busy machine only makes the abort later, so
// the test waits for it as long as it has to.
func TestWatchdogSuspended(t *testing.T) {
	var aborted atomic.Int64 // unix nanoseconds of the abort
	var out mpitest.Buffer
	w := newWatchdog(600*time.Millisecond, 0, 2, "rank 0 on host h", &out, func(int) { aborted.Store(time.Now().UnixNano()) })
	defer w.close()
	w.setPhase(&phaseTraining, 3)
	w.enter(&opGradients, 3, 0)
	// Another process resumes this one 1.5 s after it stops itself.
	cont := exec.Command("sh", "-c", fmt.Sprintf("sleep 1.5; kill -CONT %d", os.Getpid()))
	if err := cont.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	cont.Wait()
	resumed := time.Now()
	for deadline := resumed.Add(30 * time.Second); aborted.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	a := aborted.Load()
	if a == 0 {
		t.Fatalf("not aborted 30 s after the resume, a wait of 0.6 s:\n%s", out.String())
	}
	// 0.1 s of the wait came before the stop: 0.5 s at least after it.
	if d := time.Unix(0, a).Sub(resumed); d < 400*time.Millisecond {
		t.Errorf("aborted %v after the resume, want the rest of the 0.6 s wait (0.5 s):\n%s", d, out.String())
	}
}

// TestWaited: the communication line gives the wait as a share of the
// all-reduce only where it is one; a longer wait (the hand-offs to the MPI
// thread, with nothing to overlap) is said as such, not as 201%.
func TestWaited(t *testing.T) {
	for _, c := range []struct {
		comm, wait float64
		want       string
	}{
		{0.2, 0.05, "the step waited 2.5 ms for it after backward (25% of it)"},
		{0.2, 0.2, "the step waited 10.0 ms for it after backward (100% of it)"},
		{0.002, 0.006, "the step waited 0.3 ms for it after backward (all of it, and 0.2 ms of hand-offs to and from the MPI thread)"},
	} {
		if got := waited(c.comm, c.wait, 20); got != c.want {
			t.Errorf("waited(%g, %g, 20) = %q, want %q", c.comm, c.wait, got, c.want)
		}
	}
}
