package model

import (
	"math"
	"testing"

	"hpctrain/internal/dnnl"
	"hpctrain/internal/kernels"
)

// bf16Net is the CNN on oneDNN's bf16 kernels, or a skip where this build or
// CPU has none.
func bf16Net(t *testing.T, k Kernels) *Net {
	t.Helper()
	if !dnnl.Native {
		t.Skip("oneDNN not linked in (purego build): no bf16 kernels to test")
	}
	if ok, missing := dnnl.HasBF16(); !ok && k.BF16 {
		t.Skipf("bf16 kernels not available: %s", missing)
	}
	net, err := New("cnn", Shape{28, 28, 1}, 10, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := net.SetKernels(k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	return net
}

func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// Weights16 written from the parameters gives the forward the bits of its
// own conversion; after WeightsUpdated the forward reads them rather than
// converting (poisoned, they change the output), one training forward uses
// the word up, and evaluation forwards do not.
func TestWeights16(t *testing.T) {
	if fp := bf16Net(t, Kernels{DNNL: true}); fp.Weights16() != nil {
		t.Error("Weights16 on fp32 kernels: a buffer, want nil (nothing reads it)")
	}
	a := bf16Net(t, Kernels{DNNL: true, BF16: true})
	b := bf16Net(t, Kernels{DNNL: true, BF16: true})
	w16 := b.Weights16()
	if len(w16) != len(b.Params) {
		t.Fatalf("Weights16 on bf16 kernels: %d values for %d parameters", len(w16), len(b.Params))
	}
	for i := range a.Input() {
		a.Input()[i] = float32(i%29) / 29
	}
	copy(b.Input(), a.Input())
	// An "update" of every parameter, written to b's Weights16 as an
	// optimizer would.
	update := func() {
		for _, n := range []*Net{a, b} {
			for i := range n.Params {
				n.Params[i] += float32(i%7-3) * 1e-3
			}
		}
		kernels.GoToBF16(w16, b.Params)
		b.WeightsUpdated()
	}
	forward := func(n *Net) []float32 { return append([]float32(nil), n.Forward(8)...) }
	a.Forward(8) // both have converted once
	b.Forward(8)

	update()
	if ya, yb := forward(a), forward(b); !sameBits(ya, yb) {
		t.Fatalf("after an update: forward with the hook's weights %v, converting %v", yb[:4], ya[:4])
	}

	// The word is used up: the next training forward converts again.
	fc := b.Layers[len(b.Layers)-2].(*Linear) // fc1
	clear(b.x.p16[fc.off : fc.off+len(fc.w)])
	if ya, yb := forward(a), forward(b); !sameBits(ya, yb) {
		t.Fatal("a training forward without WeightsUpdated read the hook's weights instead of converting")
	}

	// Given again, the word holds through evaluation forwards until a
	// training forward; poisoned weights show that forward reads them.
	update()
	forward(a)
	clear(b.x.p16[fc.off : fc.off+len(fc.w)])
	b.SetTraining(false)
	forward(b)
	b.SetTraining(true)
	if ya, yb := forward(a), forward(b); sameBits(ya, yb) {
		t.Fatal("after WeightsUpdated and an evaluation forward, the training forward did not read the hook's weights")
	}

	// SetKernels takes the word back.
	update()
	clear(b.x.p16[fc.off : fc.off+len(fc.w)])
	if err := b.SetKernels(Kernels{DNNL: true, BF16: true}); err != nil {
		t.Fatal(err)
	}
	if ya, yb := forward(a), forward(b); !sameBits(ya, yb) {
		t.Fatal("SetKernels kept WeightsUpdated's word")
	}
}

// With bf16 kernels, a batch norm writes the bf16 input of the convolution
// after it and the bf16 output gradient of the convolution before it
// (BatchNorm.next, prev). Training and evaluation must give the bits they
// give when the convolutions convert those themselves, on one worker and
// on three, and the hand-off must happen where the layers allow it: in
// each residual block, the first batch norm hands its output to the second
// convolution, and both take the gradient to the convolution before them
// (a block's input also feeds its shortcut, and the first convolution and
// the 1x1 projections run fp32): resnet8's 3 blocks make 3 + 6 hand-offs
// a training step and 3 an evaluation, resnet20's 9 blocks 9 + 18 and 9.
func TestHandoff16SameBits(t *testing.T) {
	if !dnnl.Native {
		t.Skip("oneDNN not linked in (purego build): no bf16 kernels to test")
	}
	if ok, missing := dnnl.HasBF16(); !ok {
		t.Skipf("bf16 kernels not available: %s", missing)
	}
	run := func(on bool, name string, in Shape, par Parallel) (losses [3]float64, params string, eval []float32, handed int) {
		handoff16 = on
		defer func() { handoff16 = true }()
		net, err := New(name, in, 10, 4, 5)
		if err != nil {
			t.Fatal(err)
		}
		defer net.Close()
		net.SetParallel(par)
		if err := net.SetKernels(Kernels{DNNL: true, BF16: true}); err != nil {
			t.Fatal(err)
		}
		losses, params = goldenSteps(net)
		net.SetTraining(false)
		eval = append([]float32(nil), net.Forward(net.Batch())...)
		walk(net.Layers, func(l Layer) {
			if b, ok := l.(*BatchNorm); ok {
				handed += b.handed
			}
		})
		return
	}
	for _, c := range []struct {
		name   string
		in     Shape
		handed int // per training step (3) and evaluation (1)
	}{{"resnet8", Shape{28, 28, 1}, 3*(3+6) + 3}, {"resnet20", Shape{32, 32, 3}, 3*(9+18) + 9}} {
		for _, par := range []Parallel{Serial{}, goPar(3)} {
			l0, p0, e0, h0 := run(false, c.name, c.in, par)
			l1, p1, e1, h1 := run(true, c.name, c.in, par)
			if h0 != 0 || h1 != c.handed {
				t.Errorf("%s, %d workers: %d hand-offs, want %d (%d switched off)", c.name, par.Workers(), h1, c.handed, h0)
			}
			if l0 != l1 || p0 != p1 {
				t.Errorf("%s, %d workers: losses %v, params %s with the hand-off; %v, %s without", c.name, par.Workers(), l1, p1, l0, p0)
			}
			if !sameBits(e0, e1) {
				t.Errorf("%s, %d workers: evaluation logits differ with and without the hand-off", c.name, par.Workers())
			}
		}
	}
}
