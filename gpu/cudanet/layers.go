package cudanet

import (
	"math"

	"hpctrain/gpu/cuda"
	"hpctrain/model"
)

// layer is one stage of a device network, mirroring a layer of the CPU
// network (hpctrain/model), with the same fusions. Pointers are device
// addresses; 0 is "none" (no input gradient wanted).
type layer interface {
	out() model.Shape
	numParams() int
	// forward computes y from x for nb samples.
	forward(n *Net, x, y cuda.Ptr, nb int)
	// backward enqueues the parameter gradients (then tells n's hook
	// where they start) and, when dx is not 0, the input gradient.
	backward(n *Net, x, y, dy, dx cuda.Ptr, nb int)
}

// noParams is embedded by layers without parameters.
type noParams struct{}

func (noParams) numParams() int { return 0 }

// window is a k x k window with stride s and zero padding p over an
// (h, w, c) sample, giving ho x wo positions.
type window struct{ h, w, c, k, s, p, ho, wo int }

// conv is a 2-D convolution over the whole batch: col = im2col(x), y = col
// W^T (+ b); backward dW = dy^T col, db = column sums of dy, dcol = dy W,
// dx = col2im(dcol). With a fused max-pool (see fuse) the GEMM writes the
// Net's convolution scratch, the pool adds the bias and the ReLU, and y
// is the pool's output.
type conv struct {
	in, o        model.Shape
	g            window
	kkc, hwo     int
	bias         bool
	w, b, dw, db cuda.Ptr // (O, K, K, C), (O)
	off          int
	pool         *maxpool
}

func (l *conv) out() model.Shape { return l.o }
func (l *conv) numParams() int {
	np := l.o.C * l.kkc
	if l.bias {
		np += l.o.C
	}
	return np
}

func (n *Net) im2col(g window, nb int, x, col cuda.Ptr) {
	n.launch(n.f.im2col, nb*g.ho*g.wo*g.k*g.k*g.c, col, x, int32(nb), int32(g.h), int32(g.w), int32(g.c),
		int32(g.k), int32(g.s), int32(g.p), int32(g.ho), int32(g.wo))
}

func (n *Net) col2im(g window, nb int, col, dx cuda.Ptr) {
	n.launch(n.f.col2im, nb*g.h*g.w*g.c, dx, col, int32(nb), int32(g.h), int32(g.w), int32(g.c),
		int32(g.k), int32(g.s), int32(g.p), int32(g.ho), int32(g.wo))
}

func (l *conv) forward(n *Net, x, y cuda.Ptr, nb int) {
	m, o := nb*l.hwo, l.o.C
	n.im2col(l.g, nb, x, n.col)
	dst := y
	if l.pool != nil {
		dst = n.convOut
	}
	n.gemm(false, true, m, o, l.kkc, n.col, l.kkc, l.w, l.kkc, dst, o)
	switch {
	case l.pool != nil:
		b := cuda.Ptr(0)
		if l.bias {
			b = l.b
		}
		l.pool.run(n, dst, b, y, nb)
	case l.bias:
		n.launch(n.f.biasAdd, m*o, dst, l.b, int64(m), int32(o))
	}
}

func (l *conv) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	m, o := nb*l.hwo, l.o.C
	if l.pool != nil {
		l.pool.grad(n, dy, y, n.convOut, nb) // dy of the convolution's output
		dy = n.convOut
	}
	n.im2col(l.g, nb, x, n.col)
	n.gemm(true, false, o, l.kkc, m, dy, o, n.col, l.kkc, l.dw, l.kkc)
	if l.bias {
		n.colSums(l.db, dy, m, o)
	}
	n.ready(l.off)
	if dx == 0 {
		return
	}
	n.gemm(false, false, m, l.kkc, o, dy, o, l.w, l.kkc, n.col, l.kkc)
	n.col2im(l.g, nb, n.col, dx)
}

// linear is y = x W^T + b: x (N, I), W (O, I).
type linear struct {
	i, o         int
	bias         bool
	w, b, dw, db cuda.Ptr
	off          int
}

func (l *linear) out() model.Shape { return model.Shape{H: 1, W: 1, C: l.o} }
func (l *linear) numParams() int {
	if l.bias {
		return l.o*l.i + l.o
	}
	return l.o * l.i
}

func (l *linear) forward(n *Net, x, y cuda.Ptr, nb int) {
	n.gemm(false, true, nb, l.o, l.i, x, l.i, l.w, l.i, y, l.o)
	if l.bias {
		n.launch(n.f.biasAdd, nb*l.o, y, l.b, int64(nb), int32(l.o))
	}
}

func (l *linear) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	n.gemm(true, false, l.o, l.i, nb, dy, l.o, x, l.i, l.dw, l.i)
	if l.bias {
		n.colSums(l.db, dy, nb, l.o)
	}
	n.ready(l.off)
	if dx != 0 {
		n.gemm(false, false, nb, l.i, l.o, dy, l.o, l.w, l.i, dx, l.i)
	}
}

// relu is max(x, 0); fused into a max-pool after it, it moves nothing.
type relu struct {
	noParams
	shape model.Shape
	fused bool
}

func (l *relu) out() model.Shape { return l.shape }

func (l *relu) forward(n *Net, x, y cuda.Ptr, nb int) {
	if !l.fused {
		c := nb * l.shape.Size()
		n.launch(n.f.reluFwd, c, y, x, int64(c))
	}
}

func (l *relu) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	if dx != 0 && !l.fused {
		c := nb * l.shape.Size()
		n.launch(n.f.reluBwd, c, dx, y, dy, int64(c))
	}
}

// maxpool takes the maximum over windows and keeps its argmax (kh*K+kw)
// per output; with relu (a fused ReLU before it) it applies max(., 0)
// after. A convolution before it runs it (inConv).
type maxpool struct {
	noParams
	g      window
	o      model.Shape
	arg    cuda.Ptr // (N, Ho, Wo, C) int32
	relu   bool
	inConv bool
}

func (l *maxpool) out() model.Shape { return l.o }

// run pools x into y, adding bias (0: none) per channel after the maximum.
func (l *maxpool) run(n *Net, x, bias, y cuda.Ptr, nb int) {
	g := l.g
	n.launch(n.f.maxpoolFwd, nb*l.o.Size(), y, l.arg, x, bias, b2i(l.relu), int32(nb),
		int32(g.h), int32(g.w), int32(g.c), int32(g.k), int32(g.s), int32(g.ho), int32(g.wo))
}

// grad sets dx to the gradient of run for output gradient dy.
func (l *maxpool) grad(n *Net, dy, y, dx cuda.Ptr, nb int) {
	g := l.g
	n.launch(n.f.maxpoolBwd, nb*g.h*g.w*g.c, dx, dy, y, l.arg, b2i(l.relu), int32(nb),
		int32(g.h), int32(g.w), int32(g.c), int32(g.k), int32(g.s), int32(g.ho), int32(g.wo))
}

func (l *maxpool) forward(n *Net, x, y cuda.Ptr, nb int) {
	if !l.inConv {
		l.run(n, x, 0, y, nb)
	}
}

func (l *maxpool) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	if dx != 0 && !l.inConv {
		l.grad(n, dy, y, dx, nb)
	}
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// avgpool averages windows; backward spreads each output's gradient over
// its window.
type avgpool struct {
	noParams
	g window
	o model.Shape
}

func (l *avgpool) out() model.Shape { return l.o }

func (l *avgpool) forward(n *Net, x, y cuda.Ptr, nb int) {
	g := l.g
	n.launch(n.f.avgpoolFwd, nb*l.o.Size(), y, x, int32(nb), int32(g.h), int32(g.w), int32(g.c),
		int32(g.k), int32(g.s), int32(g.ho), int32(g.wo))
}

func (l *avgpool) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	if dx == 0 {
		return
	}
	g := l.g
	n.launch(n.f.avgpoolBwd, nb*g.h*g.w*g.c, dx, dy, int32(nb), int32(g.h), int32(g.w), int32(g.c),
		int32(g.k), int32(g.s), int32(g.ho), int32(g.wo))
}

// gap averages each channel over the sample: (H, W, C) to (1, 1, C).
type gap struct {
	noParams
	in model.Shape
}

func (l *gap) out() model.Shape { return model.Shape{H: 1, W: 1, C: l.in.C} }

func (l *gap) forward(n *Net, x, y cuda.Ptr, nb int) {
	n.launch(n.f.gapFwd, nb*l.in.C, y, x, int32(nb), int32(l.in.H*l.in.W), int32(l.in.C))
}

func (l *gap) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	if dx != 0 {
		n.launch(n.f.gapBwd, nb*l.in.Size(), dx, dy, int32(nb), int32(l.in.H*l.in.W), int32(l.in.C))
	}
}

// flat reshapes (N, H, W, C) to (N, H*W*C): nothing to move, except inside
// a residual block, where it copies (its output buffer is its own).
type flat struct {
	noParams
	size int
	copy bool
}

func (l *flat) out() model.Shape { return model.Shape{H: 1, W: 1, C: l.size} }

func (l *flat) forward(n *Net, x, y cuda.Ptr, nb int) {
	if l.copy {
		n.check(cuda.CopyDtoD(y, x, 4*nb*l.size, n.stream))
	}
}

func (l *flat) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	if l.copy && dx != 0 {
		n.check(cuda.CopyDtoD(dx, dy, 4*nb*l.size, n.stream))
	}
}

// dropout drops with the CPU network's mask (see model.Dropout).
type dropout struct {
	noParams
	shape  model.Shape
	p      float64
	id     uint64
	thresh uint64
	scale  float32
	on     bool
	key    uint64
	first  int
}

func (l *dropout) out() model.Shape { return l.shape }

// mix is SplitMix64's finaliser, as model's.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (l *dropout) apply(n *Net, dst, src cuda.Ptr, nb int) {
	sz := l.shape.Size()
	n.launch(n.f.dropout, nb*sz, dst, src, int64(nb*sz), int64(sz), int64(l.key), int64(l.first),
		int64(l.thresh), l.scale)
}

func (l *dropout) forward(n *Net, x, y cuda.Ptr, nb int) {
	if l.on = n.train && l.p > 0; !l.on {
		n.check(cuda.CopyDtoD(y, x, 4*nb*l.shape.Size(), n.stream))
		return
	}
	l.key = mix(mix(mix(mix(n.seed^0x64726f706f7574)+n.step)+n.pass) + l.id) // "dropout"
	l.first = n.firstSample
	l.apply(n, y, x, nb)
}

func (l *dropout) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	switch {
	case dx == 0:
	case !l.on:
		n.check(cuda.CopyDtoD(dx, dy, 4*nb*l.shape.Size(), n.stream))
	default:
		l.apply(n, dx, dy, nb)
	}
}

func newDropout(shape model.Shape, p float64, id uint64) *dropout {
	return &dropout{shape: shape, p: p, id: id, thresh: uint64(math.Round(p * (1 << 32))), scale: float32(1 / (1 - p))}
}
