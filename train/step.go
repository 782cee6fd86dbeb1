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
	rep    model.Replica
	opt    optim.Optimizer // nil: no update (forward and backward only)
	sched  optim.Schedule
	red    gradReducer
	bk     *buckets          // red on the CPU (its spans feed the timeline); nil on a device
	scaler *optim.LossScaler // fp16's loss scale; nil in other precisions
	inv    float32           // 1/ranks: each replica's share of the mean
	labels []int32
	n      int // samples of the loaded batch
	first  int // global index of this rank's first sample in a batch (dropout)
	step   int // the step being run (the watchdog's report)
	flt    faults
	hooked bool // opt writes the network's bf16 weights (hookWeights)

	// Marks are the ends of the last Run's phases, and Comm the time its
	// all-reduces took on the communicator's thread: for the timeline, the
	// progress figures and the benchmarks. The arithmetic never reads them.
	Marks StepMarks
	Comm  time.Duration
	// Skipped says the last Run skipped its update: fp16 gradients
	// overflowed on some rank, and the loss scale was lowered.
	Skipped bool
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

// NewStep makes the CPU step of net updated by opt (nil: no update) at the
// rates of sched, with gradients all-reduced over c in buckets of about
// bucketBytes (0: one all-reduce after backward). With c of size 1 the
// all-reduce is free.
func NewStep(net *model.Net, opt optim.Optimizer, sched optim.Schedule, c mpi.Comm, bucketBytes int) *Step {
	s := &Step{rep: net, opt: opt, sched: sched, labels: make([]int32, net.Batch()), inv: 1 / float32(c.Size())}
	s.bk = newBuckets(c, net.Grads, layerStarts(net), bucketBytes, nil)
	s.red = s.bk
	s.hookWeights()
	return s
}

// hookWeights has the optimizer write the network's bfloat16 weights as it
// updates each block of parameters, while it is in cache, where the next
// forward would otherwise convert them again (model.Net.Weights16): on the
// CPU, with bf16 kernels.
func (s *Step) hookWeights() {
	net, ok := s.rep.(*model.Net)
	if !ok || s.opt == nil {
		return
	}
	c, ok := s.opt.(optim.BF16Copier)
	if h := net.Weights16(); ok && h != nil {
		c.SetBF16Copy(h)
		s.hooked = true
	}
}

// Load copies a batch of len(y) samples into the replica's input: x is
// (N, H, W, C). The caller may reuse x and y at once.
func (s *Step) Load(x []float32, y []int32) {
	s.n = len(y)
	copy(s.rep.Input(), x[:s.n*s.rep.Host().In.Size()])
	copy(s.labels, y)
}

// Run takes global step number step (0-based: the schedule's position) on
// the loaded batch and returns this rank's loss.
func (s *Step) Run(step int) (loss float64, err error) {
	s.Marks.Start = time.Now()
	s.step, s.Skipped = step, false
	unscale := float32(1)
	if s.scaler != nil {
		// The loss, and so every gradient, scaled by the loss scale, so
		// that fp16's small gradients do not flush to zero; unscaled once
		// reduced, before the update.
		scale := float32(s.scaler.Scale())
		s.rep.SetGradScale(scale * s.inv)
		unscale = 1 / scale
	}
	s.rep.SetStep(step, s.first)
	s.flt.hang(step + 1)
	s.rep.Forward(s.n)
	loss, _ = s.rep.Loss(s.labels[:s.n])
	loss = s.flt.loss(step+1, loss)
	// A rank whose loss is not finite poisons the gradients, so every rank
	// sees it in the reduced sums and stops (or, under fp16 loss scaling,
	// skips) at this step.
	poisoned := math.IsNaN(loss) || math.IsInf(loss, 0)
	if poisoned || s.flt.overflow(step+1) {
		s.red.Poison()
	}
	s.Marks.Forward = time.Now()
	// Backward starts each bucket's all-reduce as soon as its layers are
	// done; Wait collects them. The sums of all replicas' gradients (each
	// scaled by 1/ranks, see model.Net.SetGradScale) are the gradient of
	// the mean loss over the global batch.
	s.rep.Backward(s.red)
	if err := s.rep.Err(); err != nil {
		return loss, fmt.Errorf("forward and backward passes: %w", err)
	}
	s.Marks.Backward = time.Now()
	s.Comm, err = s.red.Wait(step)
	if err != nil {
		return loss, fmt.Errorf("all-reduce of gradients: %w", err)
	}
	finite, err := s.red.Finish(unscale)
	if err != nil {
		return loss, fmt.Errorf("checking the reduced gradients: %w", err)
	}
	s.Marks.Reduced = time.Now()
	if s.scaler != nil {
		// Every rank holds the same sums, so every rank decides alike.
		if s.Skipped, err = s.scaler.Update(!finite); err != nil {
			return loss, err
		}
		if s.Skipped {
			s.Marks.Updated = time.Now()
			return loss, nil
		}
	} else if !finite {
		if poisoned {
			return loss, errLossNotFinite
		}
		return loss, errPeerNotFinite
	}
	if err := s.flt.fail(step + 1); err != nil {
		return loss, err
	}
	if s.opt != nil {
		net := s.rep.Host()
		s.opt.Step(net.Params, net.Grads, s.sched.LR(step))
		if e, ok := s.opt.(interface{ Err() error }); ok {
			if err := e.Err(); err != nil {
				return loss, fmt.Errorf("optimizer step: %w", err)
			}
		}
	}
	if s.flt.perturbs(step + 1) {
		if err := s.rep.Pull(); err != nil {
			return loss, err
		}
		s.flt.perturb(step+1, s.rep.Host().Params)
		if err := s.rep.Push(); err != nil {
			return loss, err
		}
	} else if s.hooked && s.opt != nil {
		// The optimizer wrote every parameter's new value in bf16, and
		// nothing changed them since (a perturbed step leaves the next
		// forward to convert).
		s.rep.Host().WeightsUpdated()
	}
	s.Marks.Updated = time.Now()
	return loss, nil
}

// Buckets is the number of gradient buckets; Bucket(i) the span of bucket
// i's all-reduce in the last Run and its size in bytes.
func (s *Step) Buckets() int {
	if s.bk == nil {
		return 0
	}
	return len(s.bk.b)
}

func (s *Step) Bucket(i int) (start, end time.Time, bytes int) {
	b := &s.bk.b[i]
	start, end = b.req.Span()
	return start, end, 4 * (b.hi - b.lo)
}
