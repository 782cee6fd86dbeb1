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
	name      string
	in, out   Shape
	k, s, p   int
	w, b      []float32 // (O, K, K, C), (O)
	dw, db    []float32
	col       []float32 // (N*Ho*Wo, K*K*C) workspace
	kkc, hwo  int
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

func (l *Conv2D) bind(p, g []float32, n int) {
	nw := l.out.C * l.kkc
	l.w, l.b = p[:nw], p[nw:nw+l.out.C]
	l.dw, l.db = g[:nw], g[nw:nw+l.out.C]
	l.col = make([]float32, n*l.hwo*l.kkc)
}

func (l *Conv2D) initParams(rng *rand.Rand) {
	heNormal(l.w, l.kkc, rng)
	clear(l.b)
}

// forward: x (N, H, W, C), y (N, Ho, Wo, O).
func (l *Conv2D) forward(x, y []float32, n int) {
	m, o := n*l.hwo, l.out.C
	l.im2col(x, n)
	for i := 0; i < m; i++ {
		copy(y[i*o:(i+1)*o], l.b)
	}
	gemm(noT, tr, m, o, l.kkc, 1, l.col, l.kkc, l.w, l.kkc, 1, y, o)
}

func (l *Conv2D) backward(x, y, dy, dx []float32, n int) {
	m, o := n*l.hwo, l.out.C
	// col still holds im2col(x) from forward.
	gemm(tr, noT, o, l.kkc, m, 1, dy, o, l.col, l.kkc, 0, l.dw, l.kkc)
	colSums(l.db, dy, m, o)
	if dx == nil {
		return
	}
	gemm(noT, noT, m, l.kkc, o, 1, dy, o, l.w, l.kkc, 0, l.col, l.kkc)
	l.col2im(dx, n)
}

// im2col copies every receptive field of x into a row of col, in (kh, kw, c)
// order, zeros where the field hangs over the padding.
func (l *Conv2D) im2col(x []float32, n int) {
	in, c := l.in, l.in.C
	for i := 0; i < n; i++ {
		xs := x[i*in.Size() : (i+1)*in.Size()]
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
					for kw := 0; kw < l.k; kw++ {
						iw := ow*l.s - l.p + kw
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
// input positions it was copied from.
func (l *Conv2D) col2im(dx []float32, n int) {
	in, c := l.in, l.in.C
	clear(dx[:n*in.Size()])
	for i := 0; i < n; i++ {
		xs := dx[i*in.Size() : (i+1)*in.Size()]
		for oh := 0; oh < l.out.H; oh++ {
			for ow := 0; ow < l.out.W; ow++ {
				row := l.col[((i*l.out.H+oh)*l.out.W+ow)*l.kkc:][:l.kkc]
				for kh := 0; kh < l.k; kh++ {
					ih := oh*l.s - l.p + kh
					if ih < 0 || ih >= in.H {
						continue
					}
					for kw := 0; kw < l.k; kw++ {
						iw := ow*l.s - l.p + kw
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
