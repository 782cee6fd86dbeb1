package train

import (
	"errors"
	"fmt"
	"math"
	"time"

	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
)

// Step is the training step, defined once: forward, loss, backward with
// each gradient bucket's all-reduce started as soon as backward has
// produced it, the wait for the buckets, and the optimizer update. The
// training run and the benchmarks (hpctrain bench step, bench data) run
// this same code; they time it from outside through Marks.
//
// A Step allocates nothing: Load copies a batch into the network's input,
// Run takes the step.
type Step struct {
	net    *model.Net
	opt    optim.Optimizer // nil: no update (forward and backward only)
	sched  optim.Schedule
	bk     *buckets
	labels []int32
	n      int // samples of the loaded batch
	first  int // global index of this rank's first sample in a batch (dropout)
	flt    faults

	// Marks are the ends of the last Run's phases, and Comm the time its
	// all-reduces took on the communicator's thread: for the timeline, the
	// progress figures and the benchmarks. The arithmetic never reads them.
	Marks StepMarks
	Comm  time.Duration
}

// StepMarks are the monotonic times at which a step's phases ended.
type StepMarks struct {
	Start, Forward, Backward, Reduced, Updated time.Time
}

// Errors of a step whose loss is not finite: all ranks stop at that step.
var (
	errLossNotFinite = errors.New("the loss is NaN or Inf on this rank; all ranks stop here (lower -lr?)")
	errPeerNotFinite = errors.New("another rank's loss or gradients are NaN/Inf; all ranks stop here")
)

// NewStep makes the step of net updated by opt (nil: no update) at the
// rates of sched, with gradients all-reduced over c in buckets of about
// bucketBytes (0: one all-reduce after backward). With c of size 1 the
// all-reduce is free.
func NewStep(net *model.Net, opt optim.Optimizer, sched optim.Schedule, c mpi.Comm, bucketBytes int) *Step {
	return newStep(net, opt, sched, c, bucketBytes, nil, nil)
}

func newStep(net *model.Net, opt optim.Optimizer, sched optim.Schedule, c mpi.Comm, bucketBytes int, wd *watchdog, flt faults) *Step {
	return &Step{
		net: net, opt: opt, sched: sched, flt: flt,
		bk:     newBuckets(c, net.Grads, layerStarts(net), bucketBytes, wd),
		labels: make([]int32, net.Batch()),
	}
}

// Load copies a batch of len(y) samples into the network's input: x is
// (N, H, W, C). The caller may reuse x and y at once.
func (s *Step) Load(x []float32, y []int32) {
	s.n = len(y)
	copy(s.net.Input(), x[:s.n*s.net.In.Size()])
	copy(s.labels, y)
}

// Run takes global step number step (0-based: the schedule's position) on
// the loaded batch and returns this rank's loss.
func (s *Step) Run(step int) (loss float64, err error) {
	s.Marks.Start = time.Now()
	s.net.SetStep(step, s.first)
	s.net.Forward(s.n)
	loss, _ = s.net.Loss(s.labels[:s.n])
	loss = s.flt.loss(step+1, loss)
	// A rank whose loss is not finite poisons the first bucket, so every
	// rank sees it in the reduced gradients and stops at this step.
	s.bk.poison = math.IsNaN(loss) || math.IsInf(loss, 0)
	s.Marks.Forward = time.Now()
	// Backward starts each bucket's all-reduce as soon as its layers are
	// done; wait collects them. The sums of all replicas' gradients (each
	// scaled by 1/ranks, see model.Net.SetGradScale) are the gradient of
	// the mean loss over the global batch.
	s.net.Backward(s.bk)
	if err := s.net.Err(); err != nil {
		return loss, fmt.Errorf("batch-norm statistics (sync_bn): %w", err)
	}
	s.Marks.Backward = time.Now()
	s.Comm, err = s.bk.wait(step)
	if err != nil {
		return loss, fmt.Errorf("all-reduce of gradients: %w", err)
	}
	s.Marks.Reduced = time.Now()
	if !s.bk.healthy() {
		if s.bk.poison {
			return loss, errLossNotFinite
		}
		return loss, errPeerNotFinite
	}
	if s.opt != nil {
		s.opt.Step(s.net.Params, s.net.Grads, s.sched.LR(step))
	}
	s.flt.perturb(step+1, s.net.Params)
	s.Marks.Updated = time.Now()
	return loss, nil
}

// Buckets is the number of gradient buckets; Bucket(i) the span of bucket
// i's all-reduce in the last Run and its size in bytes.
func (s *Step) Buckets() int { return len(s.bk.b) }

func (s *Step) Bucket(i int) (start, end time.Time, bytes int) {
	b := &s.bk.b[i]
	start, end = b.req.Span()
	return start, end, 4 * (b.hi - b.lo)
}
