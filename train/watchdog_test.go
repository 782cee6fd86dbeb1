package train

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestWatchdogStep: the watchdog numbers steps as every other message
// does: the step in progress from 1 during a step (it said step 1 where
// the failing rank said step 2), the steps taken between steps, and none
// before the first.
func TestWatchdogStep(t *testing.T) {
	w := newWatchdog(0, "rank 0 on host h", io.Discard, func(int) {})
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
