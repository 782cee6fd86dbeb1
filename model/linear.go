package model

import (
	"fmt"
	"math/rand/v2"

	"hpctrain/internal/kernels"
)

// Linear is a fully connected layer: y = x W^T + b.
type Linear struct {
	name   string
	in, o  int
	w, b   []float32 // (O, I), (O)
	dw, db []float32
	x      *exec
}

// FullyConnected returns the Spec of a linear layer with o outputs. Its input
// is flattened: any input shape of I values works.
func FullyConnected(o int) Spec {
	return func(in Shape, name string) (Layer, error) {
		if o < 1 {
			return nil, fmt.Errorf("%s: %d outputs", name, o)
		}
		return &Linear{name: name, in: in.Size(), o: o}, nil
	}
}

func (l *Linear) Name() string   { return l.name }
func (l *Linear) Out() Shape     { return Shape{1, 1, l.o} }
func (l *Linear) NumParams() int { return l.o*l.in + l.o }
func (l *Linear) MACs() int      { return l.o * l.in }

func (l *Linear) bind(p, g []float32, n int, x *exec) {
	l.x = x
	nw := l.o * l.in
	l.w, l.b = p[:nw], p[nw:nw+l.o]
	l.dw, l.db = g[:nw], g[nw:nw+l.o]
}

func (l *Linear) initParams(rng *rand.Rand) {
	heNormal(l.w, l.in, rng)
	clear(l.b)
}

// forward: x (N, I), y (N, O).
func (l *Linear) forward(x, y []float32, n int) {
	for i := 0; i < n; i++ {
		copy(y[i*l.o:(i+1)*l.o], l.b)
	}
	l.x.gemm(noT, tr, n, l.o, l.in, 1, x, l.in, l.w, l.in, 1, y, l.o)
}

// backward: dW = dy^T x, db = column sums of dy, dx = dy W.
func (l *Linear) backward(x, y, dy, dx []float32, n int) {
	l.x.gemm(tr, noT, l.o, l.in, n, 1, dy, l.o, x, l.in, 0, l.dw, l.in)
	kernels.ColSums(l.db, dy, n, l.o, l.o)
	if dx != nil {
		l.x.gemm(noT, noT, n, l.in, l.o, 1, dy, l.o, l.w, l.in, 0, dx, l.in)
	}
}
