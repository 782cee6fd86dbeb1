package train

import (
	"math"
	"time"

	"hpctrain/mpi"
)

// buckets groups the flat gradient buffer into ranges that are all-reduced
// separately, in reverse layer order: backward produces the last layers'
// gradients first, so their bucket's all-reduce runs on the MPI thread while
// earlier layers are still computing (the overlap of PyTorch DDP and
// Horovod). Bucket edges fall on layer edges, because a layer's gradients
// are final only when its backward is done.
type buckets struct {
	comm  mpi.Comm
	grads []float32
	b     []bucket // b[0] covers the end of the buffer: produced first
	next  int      // the next bucket to start
	wd    *watchdog
	// poison marks this rank's loss as not finite: the first bucket carries
	// a NaN in its last element to every rank, so all ranks see it in the
	// reduced gradients and stop at the same step, at no extra cost.
	poison bool
}

type bucket struct {
	lo, hi int
	req    mpi.Request
}

// newBuckets makes buckets of at least maxBytes (unless a layer ends the
// buffer first) from layer start offsets, ascending. maxBytes <= 0 makes
// one bucket, reduced after backward: no overlap.
func newBuckets(c mpi.Comm, grads []float32, layerStarts []int, maxBytes int, wd *watchdog) *buckets {
	bs := &buckets{comm: c, grads: grads, wd: wd}
	hi := len(grads)
	if maxBytes <= 0 {
		bs.b = []bucket{{lo: 0, hi: hi}}
		return bs
	}
	for i := len(layerStarts) - 1; i >= 0; i-- {
		lo := layerStarts[i]
		if (hi-lo)*4 >= maxBytes || i == 0 {
			if i == 0 {
				lo = 0
			}
			bs.b = append(bs.b, bucket{lo: lo, hi: hi})
			hi = lo
		}
	}
	return bs
}

// overlapping reports whether buckets start during backward.
func (bs *buckets) overlapping() bool { return len(bs.b) > 1 }

// Ready is model.GradHook: gradients from off to the end are final. It
// starts every bucket that lies inside [off, end).
func (bs *buckets) Ready(off int) {
	if !bs.overlapping() {
		return
	}
	for bs.next < len(bs.b) && bs.b[bs.next].lo >= off {
		bs.launch()
	}
}

// launch starts the next bucket's all-reduce.
func (bs *buckets) launch() {
	bk := &bs.b[bs.next]
	if bs.next == 0 && bs.poison {
		bs.grads[bk.hi-1] = float32(math.NaN())
	}
	bs.comm.IallreduceSum(bs.grads[bk.lo:bk.hi], &bk.req)
	bs.next++
}

// Buckets is the number of buckets.
func (bs *buckets) Buckets() int { return len(bs.b) }

// Poison marks this rank's loss as not finite (see poison).
func (bs *buckets) Poison() { bs.poison = true }

// Finish reports whether the reduced gradients carry no poison: false when
// any rank's loss was not finite (or its gradients overflowed there). The
// CPU computes in fp32 and never scales the loss: unscale must be 1.
func (bs *buckets) Finish(unscale float32) (bool, error) {
	if unscale != 1 {
		panic("train: loss scaling on the CPU")
	}
	bs.poison = false
	v := float64(bs.grads[len(bs.grads)-1])
	return !math.IsNaN(v) && !math.IsInf(v, 0), nil
}

// Wait starts whatever has not started and waits for every bucket. It
// returns the summed communication time of the buckets (on the MPI thread)
// and any error.
func (bs *buckets) Wait(step int) (comm time.Duration, err error) {
	for bs.next < len(bs.b) {
		bs.launch()
	}
	for i := range bs.b {
		bk := &bs.b[i]
		bs.wd.enter(&opGradients, step, i)
		e := bk.req.Wait()
		bs.wd.leave()
		if e != nil && err == nil {
			err = e
		}
		s, f := bk.req.Span()
		comm += f.Sub(s)
	}
	bs.next = 0
	return comm, err
}
