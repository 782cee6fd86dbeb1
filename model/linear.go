package model

import (
	"fmt"
	"math/rand/v2"

	"hpctrain/internal/kernels"
)

// Linear is a fully connected layer: y = x W^T + b (or x W^T without
// bias).
type Linear struct {
	name   string
	in, o  int
	bias   bool
	w, b   []float32 // (O, I), (O) or empty
	dw, db []float32
	x      *exec
}

// FullyConnected returns the Spec of a linear layer with o outputs and a
// bias. Its input is flattened: any input shape of I values works.
func FullyConnected(o int) Spec { return linear(o, true) }

func linear(o int, bias bool) Spec {
	return Spec{prefix: "fc", kind: "linear", make: func(in Shape, name, path string) (Layer, error) {
		if o < 1 {
			return nil, fmt.Errorf("%d outputs", o)
		}
		if tooLarge(o, in.Size()) {
			return nil, fmt.Errorf("too large (%d inputs, %d outputs)", in.Size(), o)
		}
		return &Linear{name: name, in: in.Size(), o: o, bias: bias}, nil
	}}
}

func (l *Linear) Name() string      { return l.name }
func (l *Linear) Out() Shape        { return Shape{1, 1, l.o} }
func (l *Linear) NumParams() int    { return l.o*l.in + l.nb() }
func (l *Linear) MACs() int         { return l.o * l.in }
func (l *Linear) buffers() []tensor { return nil }

func (l *Linear) nb() int {
	if l.bias {
		return l.o
	}
	return 0
}

func (l *Linear) tensors() []tensor {
	t := []tensor{{name: "weight", len: l.o * l.in}} // (O, I)
	if l.bias {
		t = append(t, tensor{name: "bias", len: l.o, bias: true}) // (O)
	}
	return t
}

func (l *Linear) bind(s slot) {
	l.x = s.x
	nw := l.o * l.in
	l.w, l.b = s.p[:nw], s.p[nw:nw+l.nb()]
	l.dw, l.db = s.g[:nw], s.g[nw:nw+l.nb()]
}

func (l *Linear) initParams(rng *rand.Rand) {
	heNormal(l.w, l.in, rng)
	clear(l.b)
}

// forward: x (N, I), y (N, O).
func (l *Linear) forward(x, y []float32, n int) {
	var beta float32
	if l.bias {
		for i := 0; i < n; i++ {
			copy(y[i*l.o:(i+1)*l.o], l.b)
		}
		beta = 1
	}
	l.x.gemm(noT, tr, n, l.o, l.in, 1, x, l.in, l.w, l.in, beta, y, l.o)
}

// backward: dW = dy^T x, db = column sums of dy, dx = dy W.
func (l *Linear) backward(x, y, dy, dx []float32, n int) {
	l.x.gemm(tr, noT, l.o, l.in, n, 1, dy, l.o, x, l.in, 0, l.dw, l.in)
	if l.bias {
		kernels.ColSums(l.db, dy, n, l.o, l.o)
	}
	if dx != nil {
		l.x.gemm(noT, noT, n, l.in, l.o, 1, dy, l.o, l.w, l.in, 0, dx, l.in)
	}
}
