package model

import (
	"fmt"

	"hpctrain/internal/kernels"
)

// ReLU is max(x, 0), element-wise. A ReLU in front of a MaxPool2D, or
// after a BatchNorm or a Residual block, is fused into that layer (see
// fuse): it then moves no data and its output is its input.
type ReLU struct {
	noParams
	name             string
	shape            Shape
	fused            bool
	x                *exec
	a, b, c          []float32 // the current call's buffers, for the tasks
	fwdTask, bwdTask samples
}

// Rectifier returns the Spec of a ReLU.
func Rectifier() Spec {
	return Spec{prefix: "relu", kind: "relu", make: func(in Shape, name, path string) (Layer, error) {
		return &ReLU{name: name, shape: in}, nil
	}}
}

func (l *ReLU) Name() string { return l.name }
func (l *ReLU) Out() Shape   { return l.shape }
func (l *ReLU) bind(s slot) {
	l.x = s.x
	l.fwdTask, l.bwdTask = l.fwd, l.bwd
}

func (l *ReLU) forward(x, y []float32, n int) {
	if l.fused {
		return
	}
	l.a, l.b = x, y
	l.x.par.Run(n, l.fwdTask)
}

func (l *ReLU) fwd(lo, hi int) {
	sz := l.shape.Size()
	kernels.ReLU(l.a[lo*sz:hi*sz], l.b[lo*sz:hi*sz])
}

// backward passes dy where the output was positive.
func (l *ReLU) backward(x, y, dy, dx []float32, n int) {
	if dx == nil || l.fused {
		return
	}
	l.a, l.b, l.c = y, dy, dx
	l.x.par.Run(n, l.bwdTask)
}

func (l *ReLU) bwd(lo, hi int) {
	sz := l.shape.Size()
	kernels.ReLUBackward(l.a[lo*sz:hi*sz], l.b[lo*sz:hi*sz], l.c[lo*sz:hi*sz])
}

// MaxPool2D takes the maximum over k x k windows with stride s and keeps,
// for every output, which element of its window it came from (argmax), so
// that backward is a scatter.
//
// A ReLU in front of the pool is fused into it, and a convolution in
// front of both runs the pool itself (see fuse): the maximum over a window
// commutes with adding a per-channel bias and with max(., 0), so
//
//	pool(relu(conv + b)) = relu(pool(conv) + b)
//
// costs one pass over the pooled output instead of two passes over the
// four times larger convolution output, and the convolution pools each
// chunk of samples while it is still in cache.
type MaxPool2D struct {
	noParams
	name             string
	in, out          Shape
	win              kernels.Window
	arg              []uint8 // (N, Ho, Wo, C): kh*k + kw of each maximum
	relu             bool    // apply max(., 0) to the output (fused ReLU)
	inConv           bool    // the convolution before it runs it
	x                *exec
	a, b, c          []float32
	fwdTask, bwdTask samples
}

// MaxPool returns the Spec of a max-pool with a k x k window and stride s.
func MaxPool(k, s int) Spec {
	return Spec{prefix: "pool", kind: "maxpool", make: func(in Shape, name, path string) (Layer, error) {
		win, err := poolWindow(in, k, s)
		if err != nil {
			return nil, err
		}
		if k > maxPoolK {
			return nil, fmt.Errorf("kernel %d larger than %d (the argmax is one byte)", k, maxPoolK)
		}
		return &MaxPool2D{name: name, in: in, out: Shape{win.Ho, win.Wo, in.C}, win: win}, nil
	}}
}

// maxPoolK is the largest max-pool kernel: the argmax of a K x K window
// is kept in one byte.
const maxPoolK = 16

// poolWindow is the window of a k x k pool with stride s, no padding.
func poolWindow(in Shape, k, s int) (kernels.Window, error) {
	if k < 1 || s < 1 {
		return kernels.Window{}, fmt.Errorf("bad pool (kernel %d, stride %d)", k, s)
	}
	if in.H < k || in.W < k {
		return kernels.Window{}, fmt.Errorf("kernel %d larger than its input %dx%d", k, in.H, in.W)
	}
	ho, wo := (in.H-k)/s+1, (in.W-k)/s+1
	return kernels.Window{H: in.H, W: in.W, C: in.C, K: k, S: s, Ho: ho, Wo: wo}, nil
}

func (l *MaxPool2D) Name() string { return l.name }
func (l *MaxPool2D) Out() Shape   { return l.out }
func (l *MaxPool2D) bind(s slot) {
	l.arg = make([]uint8, s.n*l.out.Size())
	l.x = s.x
	l.fwdTask, l.bwdTask = l.fwd, l.bwd
}

// forward: x (N, H, W, C), y (N, Ho, Wo, C).
func (l *MaxPool2D) forward(x, y []float32, n int) {
	if l.inConv {
		return
	}
	l.a, l.b = x, y
	l.x.par.Run(n, l.fwdTask)
}

func (l *MaxPool2D) fwd(lo, hi int) {
	in, out := l.in.Size(), l.out.Size()
	kernels.PoolForward(l.win, hi-lo, l.a[lo*in:hi*in], nil, l.relu, l.b[lo*out:hi*out], l.arg[lo*out:hi*out])
}

func (l *MaxPool2D) backward(x, y, dy, dx []float32, n int) {
	if dx == nil || l.inConv {
		return
	}
	l.a, l.b, l.c = y, dy, dx
	l.x.par.Run(n, l.bwdTask)
}

// bwd routes each output's gradient to its window's maximum; with a fused
// ReLU, outputs that were cut to zero pass nothing.
func (l *MaxPool2D) bwd(lo, hi int) {
	in, out := l.in.Size(), l.out.Size()
	kernels.PoolBackward(l.win, hi-lo, l.b[lo*out:hi*out], l.a[lo*out:hi*out], l.arg[lo*out:hi*out], l.relu, l.c[lo*in:hi*in])
}
