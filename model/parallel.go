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

// chunkSize is the samples per chunk for a batch of n when a chunk may
// hold at most limit samples: the chunks are a power-of-two many and as
// equal as can be, so that 2, 4 or 8 workers get equal shares (64 samples
// at most 25 a chunk: 4 chunks of 16, not 25+25+14, which left one of two
// workers 39 samples). It depends on n and limit only, never on the
// workers, so neither do the results.
func chunkSize(n, limit int) int {
	n, limit = max(n, 1), max(limit, 1)
	chunks := 1
	for chunks*limit < n {
		chunks *= 2
	}
	return (n + chunks - 1) / chunks
}
