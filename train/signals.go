package train

import (
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// stopSignalled is set by SIGUSR1 (SLURM's warning before the time limit)
// or SIGTERM (preemption, or mpirun passing on a Ctrl-C) once
// CatchStopSignals has run: a signal only sets it, and the run acts on it
// at its next step boundary (checkpoint, exit ExitRequeue). A second one
// while the checkpoint is being written changes nothing.
var stopSignalled atomic.Bool

// interruptSignalled is set by SIGINT (Ctrl-C) or SIGHUP (the terminal
// gone) once CatchStopSignals has run: the run checkpoints at its next
// step boundary as for SIGTERM, but exits ExitInterrupted, not for a
// requeue (no scheduler asked for one). The first one restores the
// signal's default, so a second ends the process at once.
var interruptSignalled atomic.Bool

var catchOnce sync.Once

// CatchStopSignals starts catching SIGUSR1 and SIGTERM, and SIGINT and
// SIGHUP unless they are ignored (nohup, a background job), for a run
// that writes checkpoints. The train command calls it before MPI_Init, so
// that a signal during start-up (MPI_Init, reading the data, building the
// model) is acted on at the first step instead of killing the rank (TERM,
// INT, HUP) or being ignored (USR1, Go's default); a run started by
// RunWith alone catches them from its checkpointer on. Idempotent; never
// undone (the process ends with the run).
func CatchStopSignals() {
	catchOnce.Do(func() {
		sigs := []os.Signal{syscall.SIGUSR1, syscall.SIGTERM}
		for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGHUP} {
			// Notify would undo the ignoring: nohup's run would stop
			// when its terminal went away.
			if !signal.Ignored(s) {
				sigs = append(sigs, s)
			}
		}
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, sigs...)
		go func() {
			for s := range ch {
				switch s {
				case syscall.SIGINT, syscall.SIGHUP:
					signal.Reset(s)
					interruptSignalled.Store(true)
				default:
					stopSignalled.Store(true)
				}
			}
		}()
	})
}

// unsavedSignal is set by SIGUSR1 in a run without checkpoints once
// WatchUnsavedSignal has run; the run says so at its next step boundary.
var unsavedSignal atomic.Bool

var watchOnce sync.Once

// WatchUnsavedSignal catches SIGUSR1 (SLURM's warning before the time
// limit, which the batch script relays) in a run that writes no
// checkpoints, only to say that nothing will be saved: Go would drop it
// without a word, and the job would then be killed at its limit with no
// sign that the warning came. SIGTERM keeps its default (the process
// ends). Idempotent.
func WatchUnsavedSignal() {
	watchOnce.Do(func() {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGUSR1)
		go func() {
			for range ch {
				unsavedSignal.Store(true)
			}
		}()
	})
}
