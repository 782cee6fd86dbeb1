package mpi

/*
#cgo pkg-config: ompi
#include <mpi.h>
#include <stdlib.h>

// What gompi v0.3.0 does not offer: in-place sums, the node-local split,
// allgather of bytes, error strings. All act on MPI_COMM_WORLD.

static int hpc_errors_return(void) {
	return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}
static int hpc_allreduce_f32(void *buf, int n) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
static int hpc_allreduce_oop(void *send, void *recv, int n) {
	return MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
static int hpc_allreduce_f64(void *buf, int n) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}
static int hpc_bcast(void *buf, int n, MPI_Datatype t, int root) {
	return MPI_Bcast(buf, n, t, root, MPI_COMM_WORLD);
}
static int hpc_bcast_f32(void *buf, int n, int root) { return hpc_bcast(buf, n, MPI_FLOAT, root); }
static int hpc_bcast_bytes(void *buf, int n, int root) { return hpc_bcast(buf, n, MPI_BYTE, root); }
static int hpc_allgather(void *send, int n, void *recv) {
	return MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD);
}
static int hpc_local(int *rank, int *size) {
	MPI_Comm local;
	int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Comm_rank(local, rank);
	MPI_Comm_size(local, size);
	return MPI_Comm_free(&local);
}
static void hpc_error_string(int code, char *buf) {
	int n = 0;
	MPI_Error_string(code, buf, &n);
	buf[n] = 0;
}
static void hpc_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
static int hpc_init(int *provided) {
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided);
}
static int hpc_serialized(int provided) { return provided >= MPI_THREAD_SERIALIZED; }
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	gompi "github.com/sbromberger/gompi"
)

// World is the communicator of a job started by an MPI launcher: every
// process of MPI_COMM_WORLD. Create it with Start.
type World struct {
	rank, size           int
	localRank, localSize int
	localFrom            string // where the local rank came from, for -v
	host                 string

	wc *gompi.Communicator // MPI_COMM_WORLD, used from the MPI thread only

	mu     sync.Mutex // guards sync and closed
	sync   request    // the blocking call in flight, reused
	queue  *queue
	closed bool

	regs atomic.Pointer[[]*region] // NodeBuffer's regions; appended on the MPI thread's return
}

type opKind int

const (
	opAllreduce32 opKind = iota
	opAllreduce64
	opBcast32
	opBcastBytes
	opAllgather
	opBarrier
	opFinalize
	opRawTimed
	opNodeBuffer
	opRegionSum
)

// Error is an error code returned by the MPI library.
type Error struct {
	Op   string // the MPI call, e.g. "MPI_Allreduce"
	Code int
	Msg  string // the library's own text for Code
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (MPI error %d)", e.Op, e.Msg, e.Code) }

func mpiErr(op string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	buf := (*C.char)(C.malloc(C.MPI_MAX_ERROR_STRING + 1))
	defer C.free(unsafe.Pointer(buf))
	C.hpc_error_string(rc, buf)
	return &Error{Op: op, Code: int(rc), Msg: C.GoString(buf)}
}

// Start initialises MPI on a dedicated OS thread and returns the world
// communicator. Rank and size come from MPI; the local rank from
// OMPI_COMM_WORLD_LOCAL_RANK/LOCAL_SIZE (Open MPI), MPI_LOCALRANKID/
// MPI_LOCALNRANKS (MPICH), else MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
func Start() (*World, error) { return StartWithin(0) }

// StartWithin is Start with a time limit on MPI_Init (0: none). MPI_Init
// waits for every rank of the job to arrive; a rank that never does (a
// node that hangs while starting, a process stopped before MPI) would hang
// the others here. After timeout StartWithin returns an error wrapping
// ErrInitTimeout, and the caller should exit: MPI cannot be used or
// finalised from this state.
func StartWithin(timeout time.Duration) (*World, error) {
	w := &World{queue: newQueue(), host: hostname()}
	started := make(chan error, 1)
	go w.loop(started)
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case err := <-started:
		if err != nil {
			return nil, err
		}
		return w, nil
	case <-expired:
		return nil, &initTimeout{timeout, w.host}
	}
}

// initTimeout is StartWithin's error after its time limit.
type initTimeout struct {
	after time.Duration
	host  string
}

func (e *initTimeout) Error() string {
	return fmt.Sprintf("MPI_Init did not complete within %v on host %s: another rank of the job has not started MPI (stuck or stopped while starting, or its node unreachable); raise -collective-timeout if start-up is this slow", e.after, e.host)
}

func (e *initTimeout) Unwrap() error { return ErrInitTimeout }

// loop owns the MPI thread: it initialises MPI and then serves requests.
func (w *World) loop(started chan<- error) {
	runtime.LockOSThread() // never unlocked: MPI stays on this thread.
	// MPI_THREAD_SERIALIZED: this thread serves the queue, and a caller
	// waiting for a request nobody has started yet may run it itself.
	var provided C.int
	if err := mpiErr("MPI_Init_thread", C.hpc_init(&provided)); err != nil {
		started <- err
		return
	}
	m := &gompi.MPI{}
	if err := mpiErr("MPI_Comm_set_errhandler", C.hpc_errors_return()); err != nil {
		started <- err
		return
	}
	w.rank, w.size = m.WorldRank(), m.WorldSize()
	w.wc = m.NewCommunicator(nil)
	lr, okR := envInt("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
	ls, okS := envInt("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
	if okR && okS {
		w.localRank, w.localSize, w.localFrom = lr, ls, "launcher environment"
	} else {
		var r, s C.int
		if err := mpiErr("MPI_Comm_split_type", C.hpc_local(&r, &s)); err != nil {
			started <- err
			return
		}
		w.localRank, w.localSize, w.localFrom = int(r), int(s), "MPI_Comm_split_type"
	}
	run := func(q *request) {
		q.start = mono()
		w.serve(m, q)
		q.end = mono()
	}
	if C.hpc_serialized(provided) != 0 {
		w.queue.run = run
	}
	started <- nil
	for {
		q := w.queue.pop()
		run(q)
		w.queue.served()
		// Read op before completing: from then on the caller owns q and
		// may already be filling it with its next request.
		last := q.op == opFinalize
		q.complete()
		if last {
			return
		}
	}
}

// maxCount is the largest element count one MPI call takes (a C int).
const maxCount = math.MaxInt32

func (w *World) serve(m *gompi.MPI, q *request) {
	q.err = nil
	switch q.op {
	case opAllreduce32:
		for b := q.f32; len(b) > 0 && q.err == nil; {
			n := min(len(b), maxCount)
			q.err = mpiErr("MPI_Allreduce", C.hpc_allreduce_f32(unsafe.Pointer(&b[0]), C.int(n)))
			b = b[n:]
		}
	case opAllreduce64:
		for b := q.f64; len(b) > 0 && q.err == nil; {
			n := min(len(b), maxCount)
			q.err = mpiErr("MPI_Allreduce", C.hpc_allreduce_f64(unsafe.Pointer(&b[0]), C.int(n)))
			b = b[n:]
		}
	case opBcast32:
		for b := q.f32; len(b) > 0 && q.err == nil; {
			n := min(len(b), maxCount)
			q.err = mpiErr("MPI_Bcast", C.hpc_bcast_f32(unsafe.Pointer(&b[0]), C.int(n), C.int(q.root)))
			b = b[n:]
		}
	case opBcastBytes:
		for b := q.b; len(b) > 0 && q.err == nil; {
			n := min(len(b), maxCount)
			q.err = mpiErr("MPI_Bcast", C.hpc_bcast_bytes(unsafe.Pointer(&b[0]), C.int(n), C.int(q.root)))
			b = b[n:]
		}
	case opAllgather:
		if len(q.b) == 0 {
			return
		}
		if len(q.b) > maxCount {
			q.err = fmt.Errorf("mpi: allgather of %d bytes per rank is over MPI's count limit", len(q.b))
			return
		}
		q.err = mpiErr("MPI_Allgather", C.hpc_allgather(unsafe.Pointer(&q.b[0]), C.int(len(q.b)), unsafe.Pointer(&q.r[0])))
	case opBarrier:
		w.wc.Barrier()
	case opNodeBuffer:
		*q.out, q.err = newRegion(q.iters)
	case opRegionSum:
		q.err = q.reg.allreduce(q.lo, len(q.f32))
	case opFinalize:
		// Windows are freed before MPI_Finalize, as MPI requires.
		if p := w.regs.Load(); p != nil {
			for _, g := range *p {
				if err := g.free(); err != nil && q.err == nil {
					q.err = err
				}
			}
		}
		m.Stop()
	case opRawTimed:
		// The calls a C program would make, back to back:
		// the reference the wrapper's overhead is measured against.
		// No receive buffer means in place.
		send := unsafe.Pointer(&q.f32[0])
		var recv unsafe.Pointer
		if q.r != nil {
			recv = unsafe.Pointer(&q.r[0])
		}
		for i := 0; i < q.iters && q.err == nil; i++ {
			if recv == nil {
				q.err = mpiErr("MPI_Allreduce", C.hpc_allreduce_f32(send, C.int(len(q.f32))))
			} else {
				q.err = mpiErr("MPI_Allreduce", C.hpc_allreduce_oop(send, recv, C.int(len(q.f32))))
			}
		}
	}
}

// call runs a on the MPI thread and returns its error.
func (w *World) call(a args) error {
	_, err := w.timedCall(a)
	return err
}

// timedCall runs a on the MPI thread and returns how long the MPI thread
// spent on it, and its error.
func (w *World) timedCall(a args) (time.Duration, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	q := &w.sync
	q.reset(a)
	w.queue.push(q, true)
	q.wait()
	d, err := time.Duration(q.end-q.start), q.err
	q.args = args{} // drop the caller's buffers
	if a.op == opFinalize {
		w.closed = true
	}
	return d, err
}

// IallreduceSum queues an in-place sum of buf behind every call queued
// before it and returns at once; r.Wait returns when it is done. buf must
// not be touched until then.
func (w *World) IallreduceSum(buf []float32, r *Request) {
	r.begin(w.sum(buf))
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		r.finish(time.Now(), ErrClosed)
		return
	}
	w.queue.push(&r.q, false)
}

func (w *World) Rank() int      { return w.rank }
func (w *World) Size() int      { return w.size }
func (w *World) LocalRank() int { return w.localRank }
func (w *World) LocalSize() int { return w.localSize }
func (w *World) Host() string   { return w.host }

// LocalSource says where the local rank was read from (for -v output).
func (w *World) LocalSource() string { return w.localFrom }

func (w *World) AllreduceSum(buf []float32) error {
	return w.call(w.sum(buf))
}

// sum is the call that sums buf: through the node's shared memory when buf
// lies in this rank's NodeBuffer, else MPI_Allreduce.
func (w *World) sum(buf []float32) args {
	if p := w.regs.Load(); p != nil {
		for _, g := range *p {
			if lo := g.offset(buf); lo >= 0 {
				return args{op: opRegionSum, f32: buf, reg: g, lo: lo}
			}
		}
	}
	return args{op: opAllreduce32, f32: buf}
}

// NodeBuffer returns n floats of memory that this rank shares with the
// other ranks of its node (MPI_Win_allocate_shared): AllreduceSum and
// IallreduceSum of a part of it sum through that memory, in place, and
// across nodes with MPI (see region). It is a collective: every rank calls
// it with the same n. It returns nil when there is nothing to share (one
// rank per node, nodes of different sizes, or a node that could not
// allocate); every rank gets the same answer. The memory is valid until
// Close.
func (w *World) NodeBuffer(n int) ([]float32, error) {
	if n < 1 {
		return nil, nil
	}
	var g *region
	if err := w.call(args{op: opNodeBuffer, iters: n, out: &g}); err != nil || g == nil {
		return nil, err
	}
	w.mu.Lock()
	var regs []*region
	if p := w.regs.Load(); p != nil {
		regs = append(regs, *p...)
	}
	regs = append(regs, g)
	w.regs.Store(&regs)
	w.mu.Unlock()
	return g.mine(), nil
}
func (w *World) AllreduceSum64(buf []float64) error {
	return w.call(args{op: opAllreduce64, f64: buf})
}
func (w *World) Bcast(buf []float32, root int) error {
	w.checkRoot(root)
	return w.call(args{op: opBcast32, f32: buf, root: root})
}
func (w *World) BcastBytes(buf []byte, root int) error {
	w.checkRoot(root)
	return w.call(args{op: opBcastBytes, b: buf, root: root})
}
func (w *World) Allgather(send, recv []byte) error {
	if len(recv) != len(send)*w.size {
		panic("mpi: allgather recv length is not size*len(send)")
	}
	return w.call(args{op: opAllgather, b: send, r: recv})
}
func (w *World) Barrier() error { return w.call(args{op: opBarrier}) }

// Abort calls MPI_Abort directly from the calling thread, so that it works
// even while the MPI thread is stuck in a collective.
func (w *World) Abort(code int) { C.hpc_abort(C.int(code)) }

// Close finalises MPI. The World cannot be used afterwards.
func (w *World) Close() error { return w.call(args{op: opFinalize}) }

func (w *World) checkRoot(root int) {
	if root < 0 || root >= w.size {
		panic("mpi: bcast root out of range")
	}
}

// RawAllreduce times iters calls of MPI_Allreduce (sum, float32) made back
// to back in one C loop with no Go in between: in place on send when recv
// is nil, else out of place. It returns the time per call. Like every
// request it runs on the caller's own thread when nothing else is being
// served, so the wrapper's calls and these run on the same thread and the
// difference is the wrapper's cost alone.
func (w *World) RawAllreduce(send, recv []float32, iters int) (time.Duration, error) {
	if len(send) == 0 || iters < 1 || (recv != nil && len(recv) != len(send)) {
		panic("mpi: bad RawAllreduce arguments")
	}
	q := args{op: opRawTimed, f32: send, iters: iters}
	if recv != nil {
		q.r = unsafe.Slice((*byte)(unsafe.Pointer(&recv[0])), 4*len(recv))
	}
	d, err := w.timedCall(q)
	return d / time.Duration(iters), err
}
