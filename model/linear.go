package model

import (
	"fmt"
	"math/rand/v2"

	"hpctrain/internal/kernels"
)

// Linear is a fully connected layer: y = x W^T + b (or x W^T without
// bias). On oneDNN's bf16 kernels, forward converts x and W to bfloat16
// once, and backward uses those conversions (and dy's, made once) in both
// of its products, instead of each block of each product converting its
// operands. W's conversion is skipped where the optimizer has already
// written it (Net.Weights16).
//
// On oneDNN, forward computes y^T = W x^T into a scratch (O, N) and writes
// its transpose (plus the bias) to y: blocks of W's rows stream W once,
// where x W^T in blocks of x's rows streams all of W per block. On the
// CNN's fc1 (64x3136 by 3136x512, one Zen 4 core, caches flushed first)
// that is 86-93 GFLOP/s in fp32 against 62-68, and in bf16 164-173.
type Linear struct {
	name   string
	in, o  int
	bias   bool
	w, b   []float32 // (O, I), (O) or empty
	dw, db []float32
	x      *exec
	batch  int
	off    int       // where W starts in the network's parameters
	xh, wh []uint16  // bf16 x (N, I) and W (O, I) of the last forward (wh: in exec's p16)
	dyh    []uint16  // bf16 dy (N, O)
	yt     []float32 // y^T (O, N): oneDNN's forward product
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
	l.batch = s.n
	l.off = s.off
}

func (l *Linear) initParams(rng *rand.Rand) {
	heNormal(l.w, l.in, rng)
	clear(l.b)
}

// forward: x (N, I), y (N, O).
func (l *Linear) forward(x, y []float32, n int) {
	if !l.x.gemmDNNL() {
		var beta float32
		if l.bias {
			for i := 0; i < n; i++ {
				copy(y[i*l.o:(i+1)*l.o], l.b)
			}
			beta = 1
		}
		l.x.gemm(noT, tr, n, l.o, l.in, 1, x, l.in, l.w, l.in, beta, y, l.o)
		return
	}
	if l.yt == nil { // once: the kernels are chosen after bind
		l.yt = make([]float32, l.o*l.batch)
	}
	yt := l.yt[:l.o*n]
	if l.x.gemmBF16() {
		if l.xh == nil {
			l.xh, l.dyh = make([]uint16, l.batch*l.in), make([]uint16, l.batch*l.o)
		}
		l.x.toBF16(l.xh[:n*l.in], x[:n*l.in])
		l.wh = l.x.weights16(l.off, l.w)
		l.x.gemm16(noT, tr, l.o, n, l.in, l.wh, l.in, l.xh, l.in, 0, yt, n)
	} else {
		l.x.gemm(noT, tr, l.o, n, l.in, 1, l.w, l.in, x, l.in, 0, yt, n)
	}
	transposeBias(y, yt, l.b, n, l.o)
}

// transposeBias writes y (N, O) = yt^T + b, yt (O, N); b empty: no bias.
// In tiles, so that both sides are read and written a cache line at a time.
func transposeBias(y, yt, b []float32, n, o int) {
	const tile = 16
	for j0 := 0; j0 < o; j0 += tile {
		j1 := min(j0+tile, o)
		for i0 := 0; i0 < n; i0 += tile {
			i1 := min(i0+tile, n)
			for i := i0; i < i1; i++ {
				row := y[i*o : (i+1)*o]
				for j := j0; j < j1; j++ {
					v := yt[j*n+i]
					if len(b) > 0 {
						v += b[j]
					}
					row[j] = v
				}
			}
		}
	}
}

// backward: dW = dy^T x, db = column sums of dy, dx = dy W.
func (l *Linear) backward(x, y, dy, dx []float32, n int) {
	if l.bias {
		kernels.ColSums(l.db, dy, n, l.o, l.o)
	}
	if l.x.gemmBF16() {
		// x and W as the forward converted them.
		l.x.toBF16(l.dyh[:n*l.o], dy[:n*l.o])
		l.x.gemm16(tr, noT, l.o, l.in, n, l.dyh, l.o, l.xh, l.in, 0, l.dw, l.in)
		if dx != nil {
			l.x.gemm16(noT, noT, n, l.in, l.o, l.dyh, l.o, l.wh, l.in, 0, dx, l.in)
		}
		return
	}
	l.x.gemm(tr, noT, l.o, l.in, n, 1, dy, l.o, x, l.in, 0, l.dw, l.in)
	if dx != nil {
		l.x.gemm(noT, noT, n, l.in, l.o, 1, dy, l.o, l.w, l.in, 0, dx, l.in)
	}
}
