package model

import (
	"fmt"
	"math/rand/v2"
)

// Conv2D is a 2-D convolution with square kernel K, stride S and zero
// padding P, computed as im2col followed by one GEMM over the whole batch:
//
//	col (N*Ho*Wo, K*K*C) = im2col(x)
//	y   (N*Ho*Wo, O)     = col W^T + b
//
// The backward pass reuses the col buffer: dW = dy^T col, then
// dcol = dy W overwrites col, and col2im scatters dcol into dx.
type Conv2D struct {
	name    string
	in, out Shape
	k, s, p int
	kkc     int       // K*K*C: one row of col
	hwo     int       // Ho*Wo: rows of col per sample
	w, b    []float32 // (O, K, K, C), (O)
	dw, db  []float32
	col     []float32 // (N*Ho*Wo, K*K*C) workspace

	x                      *exec
	cur, dcur              []float32 // the batch's x or dx, for the tasks
	im2colTask, col2imTask samples
}

// Conv returns the Spec of a convolution with o output channels, a k x k
// kernel, stride s and zero padding p.
func Conv(o, k, s, p int) Spec {
	return func(in Shape, name string) (Layer, error) {
		if o < 1 || k < 1 || s < 1 || p < 0 {
			return nil, fmt.Errorf("%s: bad convolution (out %d, kernel %d, stride %d, pad %d)", name, o, k, s, p)
		}
		ho := (in.H+2*p-k)/s + 1
		wo := (in.W+2*p-k)/s + 1
		if ho < 1 || wo < 1 {
			return nil, fmt.Errorf("%s: kernel %d does not fit input %v with padding %d", name, k, in, p)
		}
		l := &Conv2D{name: name, in: in, out: Shape{ho, wo, o}, k: k, s: s, p: p}
		l.kkc, l.hwo = k*k*in.C, ho*wo
		return l, nil
	}
}

func (l *Conv2D) Name() string   { return l.name }
func (l *Conv2D) Out() Shape     { return l.out }
func (l *Conv2D) NumParams() int { return l.out.C*l.kkc + l.out.C }
func (l *Conv2D) MACs() int      { return l.hwo * l.out.C * l.kkc }

func (l *Conv2D) bind(p, g []float32, n int, x *exec) {
	nw := l.out.C * l.kkc
	l.w, l.b = p[:nw], p[nw:nw+l.out.C]
	l.dw, l.db = g[:nw], g[nw:nw+l.out.C]
	l.col = make([]float32, n*l.hwo*l.kkc)
	l.x = x
	l.im2colTask, l.col2imTask = l.im2col, l.col2im
}

func (l *Conv2D) initParams(rng *rand.Rand) {
	heNormal(l.w, l.kkc, rng)
	clear(l.b)
}

// forward: x (N, H, W, C), y (N, Ho, Wo, O).
func (l *Conv2D) forward(x, y []float32, n int) {
	m, o := n*l.hwo, l.out.C
	l.cur = x
	l.x.par.Run(n, l.im2colTask)
	for i := 0; i < m; i++ {
		copy(y[i*o:(i+1)*o], l.b)
	}
	l.x.gemm(noT, tr, m, o, l.kkc, 1, l.col, l.kkc, l.w, l.kkc, 1, y, o)
}

func (l *Conv2D) backward(x, y, dy, dx []float32, n int) {
	m, o := n*l.hwo, l.out.C
	// col still holds im2col(x) from forward.
	l.x.gemm(tr, noT, o, l.kkc, m, 1, dy, o, l.col, l.kkc, 0, l.dw, l.kkc)
	colSums(l.db, dy, m, o)
	if dx == nil {
		return
	}
	l.x.gemm(noT, noT, m, l.kkc, o, 1, dy, o, l.w, l.kkc, 0, l.col, l.kkc)
	l.dcur = dx
	l.x.par.Run(n, l.col2imTask)
}

// im2col copies every receptive field of samples [lo, hi) of l.cur into a
// row of col, in (kh, kw, c) order, zeros where the field hangs over the
// padding.
func (l *Conv2D) im2col(lo, hi int) {
	in, c, size := l.in, l.in.C, l.in.Size()
	for i := lo; i < hi; i++ {
		xs := l.cur[i*size : (i+1)*size]
		for oh := 0; oh < l.out.H; oh++ {
			for ow := 0; ow < l.out.W; ow++ {
				row := l.col[((i*l.out.H+oh)*l.out.W+ow)*l.kkc:][:l.kkc]
				for kh := 0; kh < l.k; kh++ {
					ih := oh*l.s - l.p + kh
					seg := row[kh*l.k*c : (kh+1)*l.k*c]
					if ih < 0 || ih >= in.H {
						clear(seg)
						continue
					}
					iw0 := ow*l.s - l.p
					if iw0 >= 0 && iw0+l.k <= in.W {
						// The whole kernel row is inside: one contiguous copy.
						copy(seg, xs[(ih*in.W+iw0)*c:])
						continue
					}
					for kw := 0; kw < l.k; kw++ {
						iw := iw0 + kw
						dst := seg[kw*c : (kw+1)*c]
						if iw < 0 || iw >= in.W {
							clear(dst)
						} else {
							copy(dst, xs[(ih*in.W+iw)*c:])
						}
					}
				}
			}
		}
	}
}

// col2im is the adjoint of im2col: it adds every row of col back onto the
// input positions of samples [lo, hi) of l.dcur it was copied from.
func (l *Conv2D) col2im(lo, hi int) {
	in, c, size := l.in, l.in.C, l.in.Size()
	clear(l.dcur[lo*size : hi*size])
	for i := lo; i < hi; i++ {
		xs := l.dcur[i*size : (i+1)*size]
		for oh := 0; oh < l.out.H; oh++ {
			for ow := 0; ow < l.out.W; ow++ {
				row := l.col[((i*l.out.H+oh)*l.out.W+ow)*l.kkc:][:l.kkc]
				for kh := 0; kh < l.k; kh++ {
					ih := oh*l.s - l.p + kh
					if ih < 0 || ih >= in.H {
						continue
					}
					iw0 := ow*l.s - l.p
					if iw0 >= 0 && iw0+l.k <= in.W {
						src := row[kh*l.k*c : (kh+1)*l.k*c]
						dst := xs[(ih*in.W+iw0)*c:][:len(src)]
						for j, v := range src {
							dst[j] += v
						}
						continue
					}
					for kw := 0; kw < l.k; kw++ {
						iw := iw0 + kw
						if iw < 0 || iw >= in.W {
							continue
						}
						src := row[(kh*l.k+kw)*c:][:c]
						dst := xs[(ih*in.W+iw)*c:][:c]
						for j, v := range src {
							dst[j] += v
						}
					}
				}
			}
		}
	}
}
