package train

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog aborts the job when a collective has not completed within a
// timeout: a dead or stuck peer would otherwise hang every rank forever. It
// reports host, rank, step, the bucket waited on and the rank's cores, then
// calls abort (MPI_Abort of the whole job).
type watchdog struct {
	timeout  time.Duration
	since    atomic.Int64 // unix nanoseconds when the wait began; 0: not waiting
	step     atomic.Int64
	bucket   atomic.Int64
	describe string // "rank R on host H, cores C"
	out      io.Writer
	abort    func(code int)
	stop     chan struct{}
	once     sync.Once
}

// ExitWatchdog is the exit code of a job aborted by the watchdog.
const ExitWatchdog = 3

func newWatchdog(timeout time.Duration, describe string, out io.Writer, abort func(int)) *watchdog {
	w := &watchdog{timeout: timeout, describe: describe, out: out, abort: abort, stop: make(chan struct{})}
	if timeout > 0 {
		go w.run()
	}
	return w
}

func (w *watchdog) enter(step, bucket int) {
	if w == nil || w.timeout <= 0 {
		return
	}
	w.step.Store(int64(step))
	w.bucket.Store(int64(bucket))
	w.since.Store(time.Now().UnixNano())
}

func (w *watchdog) leave() {
	if w == nil || w.timeout <= 0 {
		return
	}
	w.since.Store(0)
}

func (w *watchdog) run() {
	tick := time.NewTicker(min(w.timeout/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case now := <-tick.C:
			s := w.since.Load()
			if s == 0 || now.Sub(time.Unix(0, s)) < w.timeout {
				continue
			}
			what := fmt.Sprintf("gradient bucket %d", w.bucket.Load())
			if w.bucket.Load() < 0 {
				what = "a blocking collective"
			}
			fmt.Fprintf(w.out, "hpctrain: %s: collective timeout: step %d waited %v for %s; a peer is dead or stuck; aborting the job (raise -collective-timeout if steps are this slow)\n",
				w.describe, w.step.Load(), w.timeout, what)
			w.abort(ExitWatchdog)
			return
		}
	}
}

func (w *watchdog) close() {
	if w != nil {
		w.once.Do(func() { close(w.stop) })
	}
}
