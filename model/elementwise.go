package model

import (
	"fmt"
	"math/rand/v2"
)

// ReLU is max(x, 0), element-wise.
type ReLU struct {
	name  string
	shape Shape
}

// Rectifier returns the Spec of a ReLU.
func Rectifier() Spec {
	return func(in Shape, name string) (Layer, error) { return &ReLU{name: name, shape: in}, nil }
}

func (l *ReLU) Name() string                       { return l.name }
func (l *ReLU) Out() Shape                         { return l.shape }
func (l *ReLU) NumParams() int                     { return 0 }
func (l *ReLU) MACs() int                          { return 0 }
func (l *ReLU) bind(p, g []float32, n int)         {}
func (l *ReLU) initParams(rng *rand.Rand)          {}

func (l *ReLU) forward(x, y []float32, n int) {
	y = y[:n*l.shape.Size()]
	for i, v := range x[:len(y)] {
		y[i] = max(v, 0)
	}
}

// backward passes dy where the output was positive.
func (l *ReLU) backward(x, y, dy, dx []float32, n int) {
	if dx == nil {
		return
	}
	dx = dx[:n*l.shape.Size()]
	for i, v := range y[:len(dx)] {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// MaxPool2D takes the maximum over k x k windows with stride s and keeps,
// for every output, the index of the input it came from (argmax), so that
// backward is a scatter.
type MaxPool2D struct {
	name    string
	in, out Shape
	k, s    int
	arg     []int32 // (N, Ho, Wo, C): index into the sample's input
}

// MaxPool returns the Spec of a max-pool with a k x k window and stride s.
func MaxPool(k, s int) Spec {
	return func(in Shape, name string) (Layer, error) {
		if k < 1 || s < 1 || in.H < k || in.W < k {
			return nil, fmt.Errorf("%s: pool window %d stride %d does not fit input %v", name, k, s, in)
		}
		out := Shape{(in.H-k)/s + 1, (in.W-k)/s + 1, in.C}
		return &MaxPool2D{name: name, in: in, out: out, k: k, s: s}, nil
	}
}

func (l *MaxPool2D) Name() string               { return l.name }
func (l *MaxPool2D) Out() Shape                 { return l.out }
func (l *MaxPool2D) NumParams() int             { return 0 }
func (l *MaxPool2D) MACs() int                  { return 0 }
func (l *MaxPool2D) initParams(rng *rand.Rand)  {}
func (l *MaxPool2D) bind(p, g []float32, n int) { l.arg = make([]int32, n*l.out.Size()) }

// forward: x (N, H, W, C), y (N, Ho, Wo, C).
func (l *MaxPool2D) forward(x, y []float32, n int) {
	in, out, c := l.in, l.out, l.in.C
	for i := 0; i < n; i++ {
		xs := x[i*in.Size() : (i+1)*in.Size()]
		ys := y[i*out.Size() : (i+1)*out.Size()]
		as := l.arg[i*out.Size() : (i+1)*out.Size()]
		for oh := 0; oh < out.H; oh++ {
			for ow := 0; ow < out.W; ow++ {
				o := (oh*out.W + ow) * c
				first := (oh*l.s*in.W + ow*l.s) * c
				copy(ys[o:o+c], xs[first:first+c])
				for ch := 0; ch < c; ch++ {
					as[o+ch] = int32(first + ch)
				}
				for kh := 0; kh < l.k; kh++ {
					for kw := 0; kw < l.k; kw++ {
						base := ((oh*l.s+kh)*in.W + ow*l.s + kw) * c
						for ch := 0; ch < c; ch++ {
							if v := xs[base+ch]; v > ys[o+ch] {
								ys[o+ch] = v
								as[o+ch] = int32(base + ch)
							}
						}
					}
				}
			}
		}
	}
}

func (l *MaxPool2D) backward(x, y, dy, dx []float32, n int) {
	if dx == nil {
		return
	}
	in, out := l.in.Size(), l.out.Size()
	clear(dx[:n*in])
	for i := 0; i < n; i++ {
		dxs := dx[i*in : (i+1)*in]
		for j, a := range l.arg[i*out : (i+1)*out] {
			dxs[a] += dy[i*out+j]
		}
	}
}
