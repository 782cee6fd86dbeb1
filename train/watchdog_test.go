package train

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestWatchdogStep: the watchdog numbers steps as every other message
// does: the step in progress from 1 during a step (it said step 1 where
// the failing rank said step 2), the steps taken between steps, and none
// before the first.
func TestWatchdogStep(t *testing.T) {
	w := newWatchdog(0, 2, "rank 0 on host h", io.Discard, func(int) {})
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

// syncBuffer is a bytes.Buffer that the watchdog's goroutine may write
// while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchdogHeld: a rank that goes the timeout (less a tick) without a
// collective says so once per quiet stretch; time spent waiting in a
// collective is not quiet, and a job of one rank, which nobody waits for,
// never says it.
func TestWatchdogHeld(t *testing.T) {
	const timeout = 400 * time.Millisecond // ticks every 100 ms
	held := func(ranks int) (*watchdog, *syncBuffer) {
		var out syncBuffer
		w := newWatchdog(timeout, ranks, "rank 1 on host h", &out, func(int) { t.Error("aborted") })
		t.Cleanup(w.close)
		return w, &out
	}
	w, out := held(2)
	w.setPhase(&phaseTraining, 6)
	w.enter(&opGradients, 6, 0)
	time.Sleep(250 * time.Millisecond) // a slow all-reduce, within the timeout
	w.leave()
	time.Sleep(120 * time.Millisecond)
	if s := out.String(); s != "" {
		t.Fatalf("120 ms after a collective: %q, want nothing", s)
	}
	time.Sleep(time.Second)
	want := "hpctrain: rank 1 on host h: no collective for "
	if s := out.String(); strings.Count(s, want) != 1 || !strings.Contains(s, ", in training at step 7; a rank waiting for this one aborts the job at -collective-timeout 400ms") {
		t.Fatalf("a second without a collective: %q, want one line %q...", s, want)
	}
	w.setPhase(&phaseEvaluation, 7) // a new stretch
	time.Sleep(time.Second)
	if s := out.String(); strings.Count(s, want) != 2 || !strings.Contains(s, "in evaluation after step 7") {
		t.Fatalf("a second stretch: %q, want a second line", s)
	}

	w, out = held(1)
	w.setPhase(&phaseTraining, 1)
	time.Sleep(time.Second)
	if s := out.String(); s != "" {
		t.Errorf("one rank: %q, want nothing", s)
	}
}

// TestWatchdogSuspended: a job suspended mid-collective (every rank
// stopped, as scontrol suspend does) for longer than the timeout is not
// aborted when it resumes; the wait goes on counting from there.
func TestWatchdogSuspended(t *testing.T) {
	var aborted atomic.Bool
	var out syncBuffer
	w := newWatchdog(600*time.Millisecond, 2, "rank 0 on host h", &out, func(int) { aborted.Store(true) })
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
	time.Sleep(300 * time.Millisecond)
	if aborted.Load() {
		t.Fatalf("aborted after a suspension, 0.4 s of waiting:\n%s", out.String())
	}
	time.Sleep(time.Second)
	if !aborted.Load() {
		t.Errorf("not aborted after 1.4 s of waiting past the suspension")
	}
}
