package model

// Task is work over items [0, n) that a Parallel splits into chunks. It is
// an alias of an unnamed interface, as are affinity.Task and optim.Task, so
// that affinity.Workers satisfies Parallel without either package importing
// the other.
//
// A Parallel splits it into chunks:
// Run(w, lo, hi) handles items [lo, hi) on worker w, w in [0, Workers()).
// Implementations are usually a small struct held by a layer, passed by
// pointer, so that handing it to a Parallel allocates nothing.
type Task = interface {
	Run(w, lo, hi int)
}

// Parallel runs Tasks on a rank's compute workers (hpctrain/affinity.Workers
// pins each to a core). Run returns when every chunk is done.
type Parallel interface {
	Workers() int
	Run(n int, t Task)
}

// Serial is a Parallel of one worker: the calling goroutine.
type Serial struct{}

func (Serial) Workers() int      { return 1 }
func (Serial) Run(n int, t Task) { t.Run(0, 0, n) }
