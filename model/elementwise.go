package model

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// ReLU is max(x, 0), element-wise.
type ReLU struct {
	name             string
	shape            Shape
	x                *exec
	a, b, c          []float32 // the current call's buffers, for the tasks
	fwdTask, bwdTask samples
}

// Rectifier returns the Spec of a ReLU.
func Rectifier() Spec {
	return func(in Shape, name string) (Layer, error) { return &ReLU{name: name, shape: in}, nil }
}

func (l *ReLU) Name() string              { return l.name }
func (l *ReLU) Out() Shape                { return l.shape }
func (l *ReLU) NumParams() int            { return 0 }
func (l *ReLU) MACs() int                 { return 0 }
func (l *ReLU) initParams(rng *rand.Rand) {}
func (l *ReLU) bind(p, g []float32, n int, x *exec) {
	l.x = x
	l.fwdTask, l.bwdTask = l.fwd, l.bwd
}

func (l *ReLU) forward(x, y []float32, n int) {
	l.a, l.b = x, y
	l.x.par.Run(n, l.fwdTask)
}

func (l *ReLU) fwd(lo, hi int) {
	sz := l.shape.Size()
	x, y := l.a[lo*sz:hi*sz], l.b[lo*sz:hi*sz]
	for i, v := range x {
		y[i] = max(v, 0)
	}
}

// backward passes dy where the output was positive.
func (l *ReLU) backward(x, y, dy, dx []float32, n int) {
	if dx == nil {
		return
	}
	l.a, l.b, l.c = y, dy, dx
	l.x.par.Run(n, l.bwdTask)
}

// bwd masks dy without branches: a ReLU output is +0 or positive, so its
// bits are zero exactly where the gradient must be cut, and data-dependent
// branches would mispredict half the time.
func (l *ReLU) bwd(lo, hi int) {
	sz := l.shape.Size()
	y, dy, dx := l.a[lo*sz:hi*sz], l.b[lo*sz:hi*sz], l.c[lo*sz:hi*sz]
	dy = dy[:len(y)]
	dx = dx[:len(y)]
	for i, v := range y {
		b := math.Float32bits(v)
		mask := -((b | -b) >> 31) // all ones if b != 0
		dx[i] = math.Float32frombits(math.Float32bits(dy[i]) & mask)
	}
}

// MaxPool2D takes the maximum over k x k windows with stride s and keeps,
// for every output, the index of the input it came from (argmax), so that
// backward is a scatter.
type MaxPool2D struct {
	name             string
	in, out          Shape
	k, s             int
	arg              []int32 // (N, Ho, Wo, C): index into the sample's input
	x                *exec
	a, b             []float32
	fwdTask, bwdTask samples
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

func (l *MaxPool2D) Name() string              { return l.name }
func (l *MaxPool2D) Out() Shape                { return l.out }
func (l *MaxPool2D) NumParams() int            { return 0 }
func (l *MaxPool2D) MACs() int                 { return 0 }
func (l *MaxPool2D) initParams(rng *rand.Rand) {}
func (l *MaxPool2D) bind(p, g []float32, n int, x *exec) {
	l.arg = make([]int32, n*l.out.Size())
	l.x = x
	l.fwdTask, l.bwdTask = l.fwd, l.bwd
}

// forward: x (N, H, W, C), y (N, Ho, Wo, C).
func (l *MaxPool2D) forward(x, y []float32, n int) {
	l.a, l.b = x, y
	l.x.par.Run(n, l.fwdTask)
}

func (l *MaxPool2D) fwd(lo, hi int) {
	in, out, c := l.in, l.out, l.in.C
	for i := lo; i < hi; i++ {
		xs := l.a[i*in.Size() : (i+1)*in.Size()]
		ys := l.b[i*out.Size() : (i+1)*out.Size()]
		as := l.arg[i*out.Size() : (i+1)*out.Size()]
		for oh := 0; oh < out.H; oh++ {
			for ow := 0; ow < out.W; ow++ {
				o := (oh*out.W + ow) * c
				yr, ar := ys[o:o+c], as[o:o+c]
				first := (oh*l.s*in.W + ow*l.s) * c
				copy(yr, xs[first:first+c])
				for ch := range ar {
					ar[ch] = int32(first + ch)
				}
				for kh := 0; kh < l.k; kh++ {
					for kw := 0; kw < l.k; kw++ {
						base := ((oh*l.s+kh)*in.W + ow*l.s + kw) * c
						if base == first {
							continue
						}
						xr := xs[base : base+c]
						for ch, v := range xr {
							if v > yr[ch] {
								yr[ch] = v
								ar[ch] = int32(base + ch)
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
	l.a, l.b = dy, dx
	l.x.par.Run(n, l.bwdTask)
}

func (l *MaxPool2D) bwd(lo, hi int) {
	in, out := l.in.Size(), l.out.Size()
	clear(l.b[lo*in : hi*in])
	for i := lo; i < hi; i++ {
		dxs := l.b[i*in : (i+1)*in]
		dys := l.a[i*out : (i+1)*out]
		for j, a := range l.arg[i*out : (i+1)*out] {
			dxs[a] += dys[j]
		}
	}
}
