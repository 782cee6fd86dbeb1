package model

import (
	"math/rand/v2"
	"sync"
	"testing"

	"hpctrain/affinity"
	"hpctrain/internal/openblas"
)

// goPar is a test Parallel: one goroutine per chunk.
type goPar int

func (p goPar) Workers() int { return int(p) }
func (p goPar) Run(n int, t Task) {
	var wg sync.WaitGroup
	for w := 0; w < int(p); w++ {
		lo, hi := w*n/int(p), (w+1)*n/int(p)
		if lo == hi {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); t.Run(w, lo, hi) }()
	}
	wg.Wait()
}

// stepKernels are the kernels stepDesc's networks compute with; tests that
// check every choice set it in turn (forKernels).
var stepKernels = DefaultKernels()

// forKernels runs f with stepKernels set to each of testKernels.
func forKernels(t *testing.T, f func(k Kernels)) {
	defer func(k Kernels) { stepKernels = k }(stepKernels)
	for _, k := range testKernels(t) {
		stepKernels = k
		f(k)
	}
}

func stepOnce(t *testing.T, p Parallel, nb int) (*Net, float64) {
	return stepShape(t, "cnn", Shape{}, p, nb)
}

func stepShape(t *testing.T, name string, in Shape, p Parallel, nb int) (*Net, float64) {
	t.Helper()
	d, err := LoadDesc(name)
	if err != nil {
		d, err = ParseDesc(name, []byte(name)) // a description given inline
	}
	if err != nil {
		t.Fatal(err)
	}
	return stepDesc(t, d, in, p, nb)
}

func stepDesc(t *testing.T, d Desc, in Shape, p Parallel, nb int) (*Net, float64) {
	t.Helper()
	if in == (Shape{}) {
		in = imageShape
	}
	net, err := Build(d, in, 10, 16, 11)
	if err != nil {
		t.Fatal(err)
	}
	net.SetParallel(p)
	if err := net.SetKernels(stepKernels); err != nil {
		t.Fatal(err)
	}
	net.SetStep(3, 0)
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range net.Input() {
		net.Input()[i] = rng.Float32()
	}
	labels := make([]int32, 16)
	for i := range labels {
		labels[i] = int32(rng.IntN(10))
	}
	net.Forward(nb)
	loss, _ := net.Loss(labels)
	net.Backward(nil)
	return net, loss
}

// TestWorkersDoNotChangeResults: the same step on 1, 2 and 3 workers (3 does
// not divide the batch) gives the same loss and gradients.
func TestWorkersDoNotChangeResults(t *testing.T) {
	ref, refLoss := stepOnce(t, Serial{}, 13)
	for _, w := range []int{2, 3} {
		net, loss := stepOnce(t, goPar(w), 13)
		if d := loss - refLoss; d > 1e-6 || d < -1e-6 {
			t.Errorf("%d workers: loss %v, serial %v", w, loss, refLoss)
		}
		if e := relErr(net.Grads, ref.Grads); e > 1e-5 {
			t.Errorf("%d workers: gradients differ from serial by %.3g", w, e)
		}
	}
}

// TestWorkersSmallInputs: layers with fewer inputs than outputs (GEMMs
// split by columns, transposed operands) on small images.
func TestWorkersSmallInputs(t *testing.T) {
	forKernels(t, func(k Kernels) { workersSmallInputs(t, k) })
}

func workersSmallInputs(t *testing.T, k Kernels) {
	for _, c := range []struct {
		name string
		in   Shape
	}{{"mlp", Shape{8, 8, 3}}, {"mlp", Shape{16, 16, 1}}, {"cnn", Shape{8, 8, 1}},
		{"lenet5", Shape{28, 28, 1}}, {"resnet8", Shape{8, 8, 3}}, {"resnet20", Shape{12, 12, 1}}, {dropoutNet, Shape{8, 8, 2}}} {
		ref, refLoss := stepShape(t, c.name, c.in, Serial{}, 13)
		for _, w := range []int{2, 3} {
			net, loss := stepShape(t, c.name, c.in, goPar(w), 13)
			if d := loss - refLoss; d > 1e-6 || d < -1e-6 {
				t.Errorf("%s %v, %s kernels, %d workers: loss %v, serial %v", c.name, c.in, k, w, loss, refLoss)
			}
			if e := relErr(net.Grads, ref.Grads); e > 1e-5 {
				t.Errorf("%s %v, %s kernels, %d workers: gradients differ from serial by %.3g", c.name, c.in, k, w, e)
			}
			if e := relErr(net.Buffers, ref.Buffers); len(ref.Buffers) > 0 && e > 1e-6 {
				t.Errorf("%s %v, %s kernels, %d workers: running statistics differ from serial by %.3g", c.name, c.in, k, w, e)
			}
		}
	}
}

func relErr(a, b []float32) float64 {
	var d, s float64
	for i := range a {
		x := float64(a[i]) - float64(b[i])
		d = max(d, max(x, -x))
		s = max(s, max(float64(b[i]), -float64(b[i])))
	}
	return d / s
}

// dropoutNet has the layers no zoo model has: dropout, a flatten and a
// max-pool inside a residual block, a conv shortcut, avgpool with
// overlapping windows, batch norm after a linear layer.
const dropoutNet = `layers = [
  {kind = "conv", out = 8, kernel = 3, pad = 1},
  {kind = "batchnorm"},
  {kind = "relu"},
  {kind = "residual", shortcut = "conv", layers = [
    {kind = "conv", out = 12, kernel = 3, pad = 1},
    {kind = "relu"},
    {kind = "maxpool", kernel = 2},
  ]},
  {kind = "avgpool", kernel = 3, stride = 1},
  {kind = "dropout", p = 0.3},
  {kind = "flatten"},
  {kind = "linear", out = 20},
  {kind = "batchnorm"},
  {kind = "relu"},
  {kind = "dropout"},
  {kind = "linear", out = "classes"},
]`

// TestStepAllocatesNothing: after the first step, forward, loss and backward
// allocate nothing (the workspace is sized once), in training and in
// evaluation, on one worker and on pinned workers.
func TestStepAllocatesNothing(t *testing.T) {
	var pinned Parallel
	cpus := []int{0}
	if m, err := affinity.Allowed(); err == nil {
		cpus = m.CPUs()[:min(2, len(m.CPUs()))]
	}
	if w, err := affinity.NewWorkers(cpus); err == nil {
		defer w.Close()
		pinned = w
	} else {
		t.Logf("no pinned workers (%v): 2 unpinned", err)
		uw := affinity.NewUnpinnedWorkers(2)
		defer uw.Close()
		pinned = uw
	}
	forKernels(t, func(k Kernels) { stepAllocatesNothing(t, k, pinned) })
}

func stepAllocatesNothing(t *testing.T, k Kernels, pinned Parallel) {
	labels := make([]int32, 16)
	for _, name := range []string{"cnn", "mlp", "lenet5", "resnet8", dropoutNet} {
		for _, par := range []Parallel{Serial{}, pinned} {
			in := Shape{}
			if name != "cnn" && name != "mlp" {
				in = Shape{16, 16, 3}
			}
			net, _ := stepShape(t, name, in, par, 16)
			for _, train := range []bool{true, false} {
				net.SetTraining(train)
				// The least of three counts: once in a few hundred steps the
				// runtime allocates a thread of its own while a pinned worker
				// sleeps in futex(2); an allocation of the step's would show
				// in every count.
				allocs := 1e9
				for range 3 {
					allocs = min(allocs, testing.AllocsPerRun(5, func() {
						net.Forward(16)
						net.Loss(labels)
						net.Backward(nil)
					}))
				}
				if !openblas.Native {
					// gonum's pure-Go Sgemm starts goroutines per call; the model's own
					// code must still allocate nothing, which the native build checks.
					t.Logf("purego build: %v allocations per step (gonum's Sgemm)", allocs)
					return
				}
				if allocs != 0 {
					t.Errorf("%.20s, %s kernels, %d workers, training %v: %v allocations per step, want 0", name, k, par.Workers(), train, allocs)
				}
			}
		}
	}
}

// TestZooHook: in every zoo model the GradHook is told each layer's start,
// in strictly decreasing order, once its gradients are final.
func TestZooHook(t *testing.T) {
	for _, name := range append(Zoo(), dropoutNet) {
		net, _ := stepShape(t, name, Shape{12, 12, 3}, goPar(2), 16)
		h := &hookRecorder{grads: net.Grads}
		net.Forward(16)
		net.Loss(make([]int32, 16))
		net.Backward(h)
		checkHook(t, net, h)
	}
}
