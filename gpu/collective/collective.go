package collective

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>

// Open MPI's extension, looked up at run time so that the build needs no
// mpi-ext.h and works with MPI libraries that lack it.
static int hpc_mpi_cuda_aware(void) {
	int (*query)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support");
	return query ? query() : 0;
}

// A device address as a pointer, for MPI libraries that take them.
static void *hpc_device_pointer(uint64_t p) { return (void *)(uintptr_t)p; }
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"hpctrain/gpu/cuda"
)

// HostComm is what the package needs of the job's MPI communicator
// (hpctrain/mpi.Comm satisfies it; this package does not import mpi).
type HostComm interface {
	Rank() int
	Size() int
	BcastBytes(buf []byte, root int) error
	AllreduceSum(buf []float32) error
}

// NewNCCL makes the NCCL communicator of c's ranks: rank 0 creates the
// ncclUniqueId, c broadcasts it, and every rank calls ncclCommInitRank.
// Every rank of c must call it. The ranks first agree (one sum over c)
// that each loaded NCCL and that rank 0 made the id, so that a rank
// without NCCL makes every rank fail here instead of the others waiting
// for it in ncclCommInitRank.
func NewNCCL(c HostComm) (*cuda.Comm, error) {
	err := cuda.LoadNCCL()
	var buf [1 + len(cuda.UniqueID{})]byte
	if c.Rank() == 0 && err == nil {
		var id cuda.UniqueID
		if id, err = cuda.GetUniqueID(); err == nil {
			buf[0] = 1
			copy(buf[1:], id[:])
		}
	}
	if e := c.BcastBytes(buf[:], 0); e != nil {
		return nil, fmt.Errorf("collective: broadcasting the NCCL id: %w", e)
	}
	failed := []float32{0}
	if err != nil {
		failed[0] = 1
	}
	if e := c.AllreduceSum(failed); e != nil {
		return nil, fmt.Errorf("collective: agreeing to start NCCL: %w", e)
	}
	if err != nil {
		return nil, err
	}
	if failed[0] != 0 || buf[0] != 1 {
		return nil, fmt.Errorf("collective: NCCL not started: %v rank(s) could not load NCCL or make its id (see their messages)", failed[0])
	}
	var id cuda.UniqueID
	copy(id[:], buf[1:])
	comm, err := cuda.InitRank(c.Size(), id, c.Rank())
	if err != nil {
		return nil, fmt.Errorf("collective: NCCL communicator of rank %d of %d: %w", c.Rank(), c.Size(), err)
	}
	return comm, nil
}

// cudaAware reports whether the MPI library takes device pointers
// (MPIX_Query_cuda_support, looked up in the running process so that the
// build does not need Open MPI's mpi-ext.h); false when it has no such
// function. Tests replace it to run the device-pointer path on the
// emulated device, whose device memory is host memory.
var cudaAware = func() bool { return C.hpc_mpi_cuda_aware() != 0 }

// Mode is how a Reducer sums: NCCL, or MPI through host memory (or device
// pointers, when the MPI library takes them).
type Mode int

const (
	NCCL Mode = iota
	MPI
)

// ParseMode reads a mode as flags write it: "nccl" or "mpi".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "nccl":
		return NCCL, nil
	case "mpi":
		return MPI, nil
	}
	return 0, fmt.Errorf("collective %q: want nccl or mpi", s)
}

// String is the mode as ParseMode reads it.
func (m Mode) String() string {
	switch m {
	case NCCL:
		return "nccl"
	case MPI:
		return "mpi"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// nanBits is a quiet NaN, the poison.
const nanBits = 0x7fc00000

// threads per block of the unscale kernel, and the most blocks launched.
const (
	blockSize = 256
	maxBlocks = 4096
)

// Reducer sums a flat gradient buffer in device memory over the ranks, in
// buckets started during backward.
//
// # Invariants
//   - b[0] covers the end of the buffer; next is the bucket Ready or Wait
//     starts next, 0 between steps.
//   - done[i], once bucket i has started, is recorded on the comm stream
//     after what the bucket needs there: NCCL, its all-reduce; MPI, its
//     copy to host (or, CUDA-aware, the compute stream's work on it).
//   - err is the first failure since the last Wait, which reports it.
type Reducer struct {
	ctx     *cuda.Context
	compute *cuda.Stream
	comm    *cuda.Stream // the reductions' stream (NCCL) or the copies' (MPI)
	mode    Mode
	aware   bool // MPI: device pointers straight to MPI
	host    HostComm
	nccl    *cuda.Comm
	grads   cuda.Ptr
	n       int
	b       []bucket
	next    int
	poison  bool
	err     error
	spent   time.Duration // in blocking calls since the last Wait

	ready, done []*cuda.Event // per bucket
	fin         *cuda.Event   // MPI: after the last copy back

	unscale *cuda.Function
	flag    cuda.Ptr       // device int32: 1 when a sum is not finite
	hflag   unsafe.Pointer // page-locked copy of flag
	stage   unsafe.Pointer // MPI, not CUDA-aware: page-locked n float32

	enter   func(bucket int)
	leave   func()
	aborted atomic.Bool
}

type bucket struct {
	lo, hi int
	// buf is what MPI sums: the bucket's range of the staging buffer, or of
	// the device buffer itself when MPI is CUDA-aware.
	buf []float32
}

// New makes the reducer of the n float32 gradients at grads, produced on
// the compute stream, in buckets of at least bucketBytes (one bucket when
// bucketBytes <= 0: reduced by Wait, no overlap) whose edges fall on
// layerStarts (ascending offsets where each layer's parameters start).
// k is the module compiled from kernels.Source (grads.cu). NCCL mode needs
// nccl (from NewNCCL), MPI mode host.
func New(ctx *cuda.Context, compute *cuda.Stream, k *cuda.Module, grads cuda.Ptr, n int, layerStarts []int, bucketBytes int, mode Mode, host HostComm, nccl *cuda.Comm) (*Reducer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("collective: %d gradients: need at least 1", n)
	}
	for i, s := range layerStarts {
		if s < 0 || s >= n || (i > 0 && s <= layerStarts[i-1]) {
			return nil, fmt.Errorf("collective: layer starts %v: want ascending offsets in [0, %d)", layerStarts, n)
		}
	}
	switch {
	case mode == NCCL && nccl == nil:
		return nil, fmt.Errorf("collective: nccl mode without an NCCL communicator")
	case mode == MPI && host == nil:
		return nil, fmt.Errorf("collective: mpi mode without a host communicator")
	case mode != NCCL && mode != MPI:
		return nil, fmt.Errorf("collective: unknown mode %d", int(mode))
	}
	r := &Reducer{ctx: ctx, compute: compute, mode: mode, host: host, nccl: nccl, grads: grads, n: n,
		b: buckets(n, layerStarts, bucketBytes)}
	if err := r.alloc(k); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// buckets cuts [0, n) as the CPU trainer does (train/buckets.go): from the
// end, a bucket closes at the first layer start that makes it at least
// maxBytes, and the last one reaches 0.
func buckets(n int, layerStarts []int, maxBytes int) []bucket {
	if maxBytes <= 0 || len(layerStarts) == 0 {
		return []bucket{{lo: 0, hi: n}}
	}
	var b []bucket
	hi := n
	for i := len(layerStarts) - 1; i >= 0; i-- {
		lo := layerStarts[i]
		if (hi-lo)*4 >= maxBytes || i == 0 {
			if i == 0 {
				lo = 0
			}
			b = append(b, bucket{lo: lo, hi: hi})
			hi = lo
		}
	}
	return b
}

// alloc makes the streams, events and buffers.
func (r *Reducer) alloc(k *cuda.Module) error {
	var err error
	fail := func(what string, err error) error { return fmt.Errorf("collective: %s: %w", what, err) }
	if r.unscale, err = k.Function("grads_unscale_finite"); err != nil {
		return fail("kernel", err)
	}
	if r.comm, err = r.ctx.NewStream(); err != nil {
		return fail("stream", err)
	}
	r.ready = make([]*cuda.Event, len(r.b))
	r.done = make([]*cuda.Event, len(r.b))
	for i := range r.b {
		if r.ready[i], err = r.ctx.NewEvent(); err != nil {
			return fail("event", err)
		}
		if r.done[i], err = r.ctx.NewEvent(); err != nil {
			return fail("event", err)
		}
	}
	if r.fin, err = r.ctx.NewEvent(); err != nil {
		return fail("event", err)
	}
	if r.flag, err = r.ctx.Alloc(4); err != nil {
		return fail("flag", err)
	}
	if r.hflag, err = r.ctx.HostAlloc(4); err != nil {
		return fail("flag", err)
	}
	if r.mode != MPI {
		return nil
	}
	r.aware = cudaAware()
	var base unsafe.Pointer
	if r.aware {
		base = C.hpc_device_pointer(C.uint64_t(r.grads))
	} else {
		if r.stage, err = r.ctx.HostAlloc(4 * r.n); err != nil {
			return fail("staging buffer", err)
		}
		base = r.stage
	}
	all := unsafe.Slice((*float32)(base), r.n)
	for i := range r.b {
		bk := &r.b[i]
		bk.buf = all[bk.lo:bk.hi:bk.hi]
	}
	return nil
}

// Buckets is the number of buckets.
func (r *Reducer) Buckets() int { return len(r.b) }

// SetWatch makes the reducer call enter(bucket) before and leave after
// every call that can block on other ranks (NCCL and MPI calls, waits for
// reductions), so that a watchdog can tell a stuck collective. Nil
// functions are not called.
func (r *Reducer) SetWatch(enter func(bucket int), leave func()) { r.enter, r.leave = enter, leave }

func (r *Reducer) watch(i int) time.Time {
	if r.enter != nil {
		r.enter(i)
	}
	return time.Now()
}

func (r *Reducer) unwatch(t time.Time) {
	r.spent += time.Since(t)
	if r.leave != nil {
		r.leave()
	}
}

// Poison marks this rank's loss as not finite for this step: the first
// bucket's last element becomes NaN before it is reduced, so every rank's
// Finish reports false. Call it before backward.
func (r *Reducer) Poison() { r.poison = true }

// Ready is model.GradHook: backward has enqueued the kernels of the layers
// from off to the end. It starts every bucket inside [off, n) (none when
// there is one bucket: Wait starts it).
func (r *Reducer) Ready(off int) {
	if len(r.b) == 1 {
		return
	}
	for r.next < len(r.b) && r.b[r.next].lo >= off {
		r.start()
	}
}

// start starts the next bucket: the comm stream waits for the compute
// stream; NCCL reduces there, MPI copies the bucket out (MPI itself runs
// in Wait, when the copy is done).
func (r *Reducer) start() {
	i := r.next
	r.next++
	if r.err != nil {
		return
	}
	if r.aborted.Load() {
		r.err = errAborted
		return
	}
	bk := &r.b[i]
	if err := r.ready[i].Record(r.compute); err != nil {
		r.err = fmt.Errorf("collective: bucket %d: %w", i, err)
		return
	}
	if err := r.comm.Wait(r.ready[i]); err != nil {
		r.err = fmt.Errorf("collective: bucket %d: %w", i, err)
		return
	}
	if i == 0 && r.poison {
		if err := cuda.MemsetD32(r.grads.Add(4*(bk.hi-1)), nanBits, 1, r.comm); err != nil {
			r.err = fmt.Errorf("collective: poisoning bucket 0: %w", err)
			return
		}
	}
	p, count := r.grads.Add(4*bk.lo), bk.hi-bk.lo
	switch {
	case r.mode == NCCL:
		t := r.watch(i)
		err := r.nccl.AllReduceSum(p, p, count, r.comm)
		r.unwatch(t)
		if err != nil {
			r.err = fmt.Errorf("collective: nccl all-reduce of bucket %d: %w", i, err)
			return
		}
	case !r.aware:
		if err := cuda.CopyDtoH(unsafe.Pointer(&bk.buf[0]), p, 4*count, r.comm); err != nil {
			r.err = fmt.Errorf("collective: bucket %d to host: %w", i, err)
			return
		}
	}
	if err := r.done[i].Record(r.comm); err != nil {
		r.err = fmt.Errorf("collective: bucket %d: %w", i, err)
	}
}

var errAborted = fmt.Errorf("collective: aborted (a collective did not complete in time)")

// Wait starts the buckets not started yet and waits until every bucket is
// reduced and the compute stream is ordered after the reductions. comm is
// the time spent blocked in communication: in NCCL and MPI calls and in
// waiting for their results (with NCCL on a GPU, the part of the
// reductions that backward's kernels did not hide).
func (r *Reducer) Wait() (comm time.Duration, err error) {
	for r.next < len(r.b) {
		r.start()
	}
	err = r.err
	if err == nil {
		if r.mode == NCCL {
			err = r.waitNCCL()
		} else {
			err = r.reduceMPI()
		}
	}
	comm = r.spent
	r.next, r.poison, r.err, r.spent = 0, false, nil, 0
	return comm, err
}

// waitNCCL waits for each bucket's all-reduce, in order, and orders the
// compute stream after the last.
func (r *Reducer) waitNCCL() error {
	for i, ev := range r.done {
		t := r.watch(i)
		err := ev.Sync()
		r.unwatch(t)
		if err == nil && r.aborted.Load() {
			err = errAborted
		}
		if err != nil {
			return fmt.Errorf("collective: nccl all-reduce of bucket %d: %w", i, err)
		}
	}
	// No ncclCommGetAsyncError here: the reductions completed. A network
	// failure shows as a wait that does not end, which the watchdog
	// catches (SetWatch) and ends with Abort.
	if err := r.compute.Wait(r.done[len(r.done)-1]); err != nil {
		return fmt.Errorf("collective: %w", err)
	}
	return nil
}

// reduceMPI sums each bucket with MPI once its copy (or, CUDA-aware, its
// gradients) is ready, copies it back, and orders the compute stream after
// the copies. MPI of bucket i overlaps the device's work on the buckets
// after it.
func (r *Reducer) reduceMPI() error {
	for i := range r.b {
		bk := &r.b[i]
		if err := r.done[i].Sync(); err != nil {
			return fmt.Errorf("collective: bucket %d: %w", i, err)
		}
		t := r.watch(i)
		err := r.host.AllreduceSum(bk.buf)
		r.unwatch(t)
		if err != nil {
			return fmt.Errorf("collective: mpi all-reduce of bucket %d: %w", i, err)
		}
		if r.aware {
			continue
		}
		if err := cuda.CopyHtoD(r.grads.Add(4*bk.lo), unsafe.Pointer(&bk.buf[0]), 4*(bk.hi-bk.lo), r.comm); err != nil {
			return fmt.Errorf("collective: bucket %d to the device: %w", i, err)
		}
	}
	if r.aware {
		return nil // MPI returned with the sums in place
	}
	if err := r.fin.Record(r.comm); err != nil {
		return fmt.Errorf("collective: %w", err)
	}
	if err := r.compute.Wait(r.fin); err != nil {
		return fmt.Errorf("collective: %w", err)
	}
	return nil
}

// Finish multiplies the reduced gradients by unscale (not when it is 1)
// and reports whether all of them are finite, on the compute stream, which
// it waits for (one 4-byte copy). Every rank holds the same sums, so every
// rank gets the same answer.
func (r *Reducer) Finish(unscale float32) (finite bool, err error) {
	if err := cuda.MemsetD32(r.flag, 0, 1, r.compute); err != nil {
		return false, fmt.Errorf("collective: finish: %w", err)
	}
	grid := cuda.Dim3{X: min(maxBlocks, (r.n+blockSize-1)/blockSize), Y: 1, Z: 1}
	block := cuda.Dim3{X: blockSize, Y: 1, Z: 1}
	if err := r.unscale.Launch(grid, block, r.compute, r.grads, int64(r.n), unscale, r.flag); err != nil {
		return false, fmt.Errorf("collective: finish: %w", err)
	}
	if err := cuda.CopyDtoH(r.hflag, r.flag, 4, r.compute); err != nil {
		return false, fmt.Errorf("collective: finish: %w", err)
	}
	if err := r.compute.Sync(); err != nil {
		return false, fmt.Errorf("collective: finish: %w", err)
	}
	return *(*int32)(r.hflag) == 0, nil
}

// Abort gives up the reductions in flight: ncclCommAbort, which makes a
// blocked NCCL call or wait return; later calls fail. Safe from any
// goroutine (the watchdog's). In MPI mode it only marks the reducer
// aborted: a blocked MPI call ends with the job (the watchdog's
// MPI_Abort).
func (r *Reducer) Abort() {
	if r.aborted.Swap(true) {
		return
	}
	if r.nccl != nil {
		r.nccl.Abort()
	}
}

// Close releases the reducer's streams, events and buffers (not the NCCL
// communicator, which its maker owns), after the comm stream's work.
func (r *Reducer) Close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if r.comm != nil {
		keep(r.comm.Sync())
	}
	for _, evs := range [][]*cuda.Event{r.ready, r.done, {r.fin}} {
		for _, e := range evs {
			if e != nil {
				keep(e.Destroy())
			}
		}
	}
	r.ready, r.done, r.fin = nil, nil, nil
	if r.comm != nil {
		keep(r.comm.Destroy())
		r.comm = nil
	}
	if r.flag != 0 {
		keep(r.ctx.Free(r.flag))
		r.flag = 0
	}
	for _, p := range []*unsafe.Pointer{&r.hflag, &r.stage} {
		if *p != nil {
			keep(r.ctx.HostFree(*p))
			*p = nil
		}
	}
	if first != nil {
		return fmt.Errorf("collective: close: %w", first)
	}
	return nil
}
