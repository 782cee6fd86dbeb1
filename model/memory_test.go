package model

import (
	"math"
	"testing"
)

// wideConv is a convolution whose chunks' weight-gradient partials pass
// partsBudget on 16x16x64 inputs: 8 or 16 chunks at a batch of 16 (by
// the kernels), each partial
// 147,712 floats.
const wideConv = `layers = [
  {kind = "conv", out = 256, kernel = 3, pad = 1},
  {kind = "relu"},
  {kind = "globalavgpool"},
  {kind = "linear", out = "classes"},
]`

// TestConvPartsPerWorker: a wide convolution keeps one weight-gradient
// partial per worker and the running sum, not one per chunk (a copy of its
// weights per sample where chunks are single samples), and its gradients
// stay the same to the bit on 1, 2 and 3 workers.
func TestConvPartsPerWorker(t *testing.T) {
	in := Shape{H: 16, W: 16, C: 64}
	ref, refLoss := stepShape(t, wideConv, in, Serial{}, 16)
	for _, w := range []int{1, 2, 3} {
		var net *Net
		loss := refLoss
		if w == 1 {
			net = ref
		} else {
			net, loss = stepShape(t, wideConv, in, goPar(w), 16)
		}
		c := net.Layers[0].(*Conv2D)
		if c.chunks(16) <= w+1 {
			t.Fatalf("%d workers: %d chunks, too few to test waves", w, c.chunks(16))
		}
		if rows := len(c.part) / len(c.grad); rows > w+1 {
			t.Errorf("%d workers: %d weight-gradient partials, want at most %d", w, rows, w+1)
		}
		if loss != refLoss {
			t.Errorf("%d workers: loss %v, serial %v", w, loss, refLoss)
		}
		for i := range ref.Grads {
			if math.Float32bits(net.Grads[i]) != math.Float32bits(ref.Grads[i]) {
				t.Fatalf("%d workers: gradient %d is %v, serial %v", w, i, net.Grads[i], ref.Grads[i])
			}
		}
	}
}

// TestScratchCoversConv: Summary.ScratchBytes covers every buffer a wide
// convolution allocates beside its output and parameters after a step
// (memory checks before building used to leave them out: a network of
// such layers was OOM-killed instead of refused).
func TestScratchCoversConv(t *testing.T) {
	in := Shape{H: 16, W: 16, C: 64}
	d, err := ParseDesc("wide.toml", []byte(wideConv))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(d, in, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []int{1, 3} {
		net, _ := stepShape(t, wideConv, in, goPar(w), 16)
		c := net.Layers[0].(*Conv2D)
		n := 4 * (len(c.part) + len(c.wT) + len(c.w16))
		n += 2 * len(c.x16)
		for _, b := range [][][]float32{c.cols, c.pads, c.dwT, c.outs} {
			for _, v := range b {
				n += 4 * len(v)
			}
		}
		for _, v := range c.dy16 {
			n += 2 * len(v)
		}
		for _, v := range c.pads16 {
			n += 2 * len(v)
		}
		if got := s.ScratchBytes(16, w); got < int64(n) {
			t.Errorf("%d workers: ScratchBytes %d, the layer allocated %d", w, got, n)
		}
	}
}
