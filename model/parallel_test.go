package model

import (
	"math/rand/v2"
	"sync"
	"testing"

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

func stepOnce(t *testing.T, p Parallel, nb int) (*Net, float64) {
	return stepShape(t, "cnn", Shape{}, p, nb)
}

func stepShape(t *testing.T, name string, in Shape, p Parallel, nb int) (*Net, float64) {
	net, err := New(name, in, 10, 16, 11)
	if err != nil {
		t.Fatal(err)
	}
	net.SetParallel(p)
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
	for _, c := range []struct {
		name string
		in   Shape
	}{{"mlp", Shape{8, 8, 3}}, {"mlp", Shape{16, 16, 1}}, {"cnn", Shape{8, 8, 1}}} {
		ref, refLoss := stepShape(t, c.name, c.in, Serial{}, 13)
		for _, w := range []int{2, 3} {
			net, loss := stepShape(t, c.name, c.in, goPar(w), 13)
			if d := loss - refLoss; d > 1e-6 || d < -1e-6 {
				t.Errorf("%s %v, %d workers: loss %v, serial %v", c.name, c.in, w, loss, refLoss)
			}
			if e := relErr(net.Grads, ref.Grads); e > 1e-5 {
				t.Errorf("%s %v, %d workers: gradients differ from serial by %.3g", c.name, c.in, w, e)
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

// TestStepAllocatesNothing: after the first step, forward, loss and backward
// allocate nothing (the workspace is sized once).
func TestStepAllocatesNothing(t *testing.T) {
	net, _ := stepOnce(t, Serial{}, 16)
	labels := make([]int32, 16)
	allocs := testing.AllocsPerRun(5, func() {
		net.Forward(16)
		net.Loss(labels)
		net.Backward(nil)
	})
	if !openblas.Native {
		// gonum's pure-Go Sgemm starts goroutines per call; the model's own
		// code must still allocate nothing, which the native build checks.
		t.Logf("purego build: %v allocations per step (gonum's Sgemm)", allocs)
		return
	}
	if allocs != 0 {
		t.Errorf("%v allocations per step, want 0", allocs)
	}
}
