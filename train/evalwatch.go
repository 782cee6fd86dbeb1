package train

import (
	"flag"
	"fmt"
	"io"
	"time"

	"hpctrain/data"
	"hpctrain/model"
	"hpctrain/mpi"
)

// Timeouts are the watchdog's two limits, for a command other than train
// that runs collectives over the ranks of a launch (eval): Collective is
// -collective-timeout, Step is -step-timeout, as in Config.
type Timeouts struct {
	Collective, Step time.Duration
}

// collectiveTimeoutHelp is -collective-timeout's help, train's and eval's.
const collectiveTimeoutHelp = "abort the whole job when a collective has not completed after this `duration` (integer seconds or a duration like 5m; 0: never)"

// timeoutRange is what a watchdog limit may be (timeoutOK).
const timeoutRange = "0 (never) or at least 1s"

// timeoutOK reports whether d is a watchdog limit: 0 (never) or at least a
// second. Below a second the watchdog would take start-up itself for a
// dead peer (and under 4 ns it had no interval to tick at).
func timeoutOK(d time.Duration) bool { return d == 0 || d >= time.Second }

// DefaultTimeouts are train's defaults.
func DefaultTimeouts() Timeouts {
	c := Defaults()
	return Timeouts{Collective: c.CollectiveTimeout, Step: c.StepTimeout}
}

// Flags binds -collective-timeout and -step-timeout to fs.
func (t *Timeouts) Flags(fs *flag.FlagSet) {
	fs.Var(seconds{&t.Collective}, "collective-timeout", collectiveTimeoutHelp)
	fs.Var(seconds{&t.Step}, "step-timeout", "abort the whole job when a batch of evaluation has gone this `duration` without finishing or reaching a collective, or the data's load without reading a file: stuck on every rank at once, or in a job of one rank, where no collective times out (integer seconds or a duration like 10m; 0: never)")
}

// Validate says which limit is out of range, as Config.Validate does.
func (t Timeouts) Validate() error {
	for _, l := range []struct {
		flag string
		d    time.Duration
	}{{"-collective-timeout", t.Collective}, {"-step-timeout", t.Step}} {
		if !timeoutOK(l.d) {
			return fmt.Errorf("%s %v: must be %s", l.flag, l.d, timeoutRange)
		}
	}
	return nil
}

// Watch is a training run's watchdog for another command: its
// collectives (through Comm) are timed by the collective timeout, its
// load of the data and its batches of evaluation by the step timeout, and
// a rank that holds its peers up names itself; a timeout aborts the whole
// launch with ExitWatchdog and one line. Without it, a rank of `mpirun
// hpctrain eval` that died or hung left the others in their reduction for
// good, as did a hung file system under every rank.
type Watch struct {
	wd   *watchdog
	flt  faults
	comm mpi.Comm
}

// NewWatch starts a watchdog over comm's ranks; errOut takes its lines.
// FaultEnv's hang@RANK:loading, hang@RANK:evaluation and
// stop@RANK:evaluation apply, as in a training run. Collective: every rank
// gets the same verdict on FaultEnv.
func NewWatch(comm mpi.Comm, t Timeouts, errOut io.Writer) (*Watch, error) {
	w := &Watch{wd: newWatchdog(t.Collective, t.Step, comm.Size(), fmt.Sprintf("rank %d on host %s", comm.Rank(), comm.Host()), errOut, comm.Abort)}
	w.comm = guard(comm, w.wd)
	var err error
	w.flt, err = faultsFromEnv(comm.Rank())
	if err = Agree(w.comm, "reading "+FaultEnv, err); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Comm is the communicator whose collectives the watchdog times.
func (w *Watch) Comm() mpi.Comm { return w.comm }

// OpenEval is t.OpenEval with the load timed file by file (an image
// folder: image by image).
func (w *Watch) OpenEval(t *Trained, dc data.Config, testLimit, ranks int, warn func(string)) (*EvalSet, error) {
	w.wd.setPhase(&phaseLoading, 0)
	defer w.wd.setPhase(&phaseStartup, 0)
	return t.openEval(dc, testLimit, ranks, warn, func() {
		w.wd.batchBegins()
		w.flt.hangIn(&phaseLoading)
	})
}

// Evaluate is Evaluate on Comm, each batch timed.
func (w *Watch) Evaluate(net model.Replica, ld *data.Loader, n int) (Evaluation, error) {
	w.wd.setPhase(&phaseEvaluation, 0)
	defer w.wd.setPhase(&phaseFinish, 0)
	w.flt.enter(&phaseEvaluation)
	return evaluateEach(w.comm, net, ld, n, func() {
		w.wd.batchBegins()
		w.flt.hangIn(&phaseEvaluation)
	})
}

// Close stops the watchdog.
func (w *Watch) Close() { w.wd.close() }
