package mpi

import (
	"errors"
	"os"
	"strconv"
	"time"
)

// Comm is the narrow communicator the trainer needs. Collectives block until
// every rank has called them.
type Comm interface {
	// Rank is this process's rank in the job, in [0, Size).
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// LocalRank is this process's rank among the ranks on its node.
	LocalRank() int
	// LocalSize is the number of ranks on this process's node.
	LocalSize() int
	// Host is the name of the node this rank runs on.
	Host() string

	// AllreduceSum replaces buf on every rank with the element-wise sum of
	// buf over all ranks (in place).
	AllreduceSum(buf []float32) error
	// IallreduceSum starts AllreduceSum of buf and returns at once; r.Wait
	// reports when it is done. buf must not be touched before then. Calls
	// started this way and blocking calls run in the order they were made.
	IallreduceSum(buf []float32, r *Request)
	// NodeBuffer returns n floats of memory shared with the other ranks of
	// this rank's node, for a buffer that is all-reduced again and again
	// (gradients): AllreduceSum and IallreduceSum of a part of it sum
	// through the shared memory in place, and across nodes with MPI. It is
	// a collective (every rank passes the same n) and returns nil, on every
	// rank alike, where nothing would be shared; the caller then uses
	// memory of its own.
	NodeBuffer(n int) ([]float32, error)
	// AllreduceSum64 is AllreduceSum for float64 (metrics, counters).
	AllreduceSum64(buf []float64) error
	// Bcast copies root's buf into buf on every other rank.
	Bcast(buf []float32, root int) error
	// BcastBytes is Bcast for bytes.
	BcastBytes(buf []byte, root int) error
	// Allgather places every rank's send (all of one length) into recv, rank
	// r's at recv[r*len(send):]. len(recv) must be Size()*len(send).
	Allgather(send, recv []byte) error
	// Barrier returns once every rank has called it.
	Barrier() error
	// Abort ends every rank of the job with the exit code. It does not return.
	Abort(code int)
	// Close releases the communicator (MPI_Finalize for World).
	Close() error
}

// ErrClosed is returned by calls on a closed communicator.
var ErrClosed = errors.New("mpi: communicator closed")

// ErrInitTimeout is wrapped by StartWithin's error when MPI_Init did not
// complete in time: another rank never reached it. It is a hang of the job
// as a collective timeout is, and a caller should exit as it would for one.
var ErrInitTimeout = errors.New("MPI_Init timed out")

// Launched reports whether the environment shows that an MPI-aware launcher
// (mpirun/mpiexec of Open MPI, MPICH/Hydra or PMIx, or srun with a PMI plugin)
// started this process. Without one, hpctrain runs as a job of one process and
// does not initialise MPI at all.
func Launched() bool {
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"} {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// envInt returns the integer value of the first of keys that is set and
// parses, and whether one did.
func envInt(keys ...string) (int, bool) {
	for _, k := range keys {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && os.Getenv(k) != "" {
			return v, true
		}
	}
	return 0, false
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown-host"
	}
	return h
}

// Request is a non-blocking call in flight. The caller owns it and may reuse
// it once Wait has returned; each started call must be waited for once.
type Request struct {
	q       request
	pending bool
}

func (r *Request) begin(a args) {
	if r.pending {
		panic("mpi: request reused before Wait")
	}
	r.q.reset(a)
	r.pending = true
}

// Wait blocks until the call is done and returns its error.
func (r *Request) Wait() error {
	if !r.pending {
		panic("mpi: Wait on a request not started")
	}
	r.q.wait()
	r.pending = false
	r.q.args = args{} // drop the caller's buffer
	return r.q.err
}

// Span returns when the communicator started and finished the call (zero
// times for implementations that run it at once). Valid after Wait.
func (r *Request) Span() (start, end time.Time) { return monoTime(r.q.start), monoTime(r.q.end) }

// finish completes r at once with err (for implementations without a
// background thread).
func (r *Request) finish(start time.Time, err error) {
	r.q.start, r.q.end, r.q.err = int64(start.Sub(epoch)), mono(), err
	r.q.complete()
}
