package kernels

import "fmt"

// Window is the geometry of a k x k window sliding with stride S over an
// H x W x C sample with zero padding P, giving Ho x Wo positions.
type Window struct{ H, W, C, K, S, P, Ho, Wo int }

// In is the number of values of one input sample.
func (g Window) In() int { return g.H * g.W * g.C }

// Out is the number of values of one pooled output sample (Ho*Wo*C).
func (g Window) Out() int { return g.Ho * g.Wo * g.C }

// Cols is the number of values of one sample's im2col block
// (Ho*Wo rows of K*K*C).
func (g Window) Cols() int { return g.Ho * g.Wo * g.K * g.K * g.C }

func (g Window) check(n int, lens ...int) {
	if n < 0 || g.K < 1 || g.S < 1 || g.P < 0 || g.Ho < 1 || g.Wo < 1 ||
		(g.Ho-1)*g.S-g.P+g.K > g.H+g.P || (g.Wo-1)*g.S-g.P+g.K > g.W+g.P {
		panic(fmt.Sprintf("kernels: bad window %+v", g))
	}
	for i := 0; i+1 < len(lens); i += 2 {
		if lens[i] < lens[i+1] {
			panic(fmt.Sprintf("kernels: buffer of %d values, need %d (window %+v, %d samples)", lens[i], lens[i+1], g, n))
		}
	}
}

// GoIm2col copies every receptive field of n samples of x into a row of
// col, in (kh, kw, c) order, with zeros where the field hangs over the
// padding.
func GoIm2col(g Window, n int, x, col []float32) {
	kc := g.K * g.C
	kkc := g.K * kc
	for i := 0; i < n; i++ {
		xs := x[i*g.In() : (i+1)*g.In()]
		cs := col[i*g.Cols() : (i+1)*g.Cols()]
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				row := cs[(oh*g.Wo+ow)*kkc:][:kkc]
				iw0 := ow*g.S - g.P
				for kh := 0; kh < g.K; kh++ {
					ih := oh*g.S - g.P + kh
					seg := row[kh*kc : (kh+1)*kc]
					if ih < 0 || ih >= g.H {
						clear(seg)
						continue
					}
					for kw := 0; kw < g.K; kw++ {
						iw := iw0 + kw
						dst := seg[kw*g.C : (kw+1)*g.C]
						if iw < 0 || iw >= g.W {
							clear(dst)
						} else {
							copy(dst, xs[(ih*g.W+iw)*g.C:])
						}
					}
				}
			}
		}
	}
}

// GoCol2im is the adjoint of GoIm2col: it sets dx to the sum, over every
// row of col, of the values copied from each input position.
func GoCol2im(g Window, n int, col, dx []float32) {
	kc := g.K * g.C
	kkc := g.K * kc
	clear(dx[:n*g.In()])
	for i := 0; i < n; i++ {
		xs := dx[i*g.In() : (i+1)*g.In()]
		cs := col[i*g.Cols() : (i+1)*g.Cols()]
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				row := cs[(oh*g.Wo+ow)*kkc:][:kkc]
				for kh := 0; kh < g.K; kh++ {
					ih := oh*g.S - g.P + kh
					if ih < 0 || ih >= g.H {
						continue
					}
					for kw := 0; kw < g.K; kw++ {
						iw := ow*g.S - g.P + kw
						if iw < 0 || iw >= g.W {
							continue
						}
						src := row[(kh*g.K+kw)*g.C:][:g.C]
						dst := xs[(ih*g.W+iw)*g.C:][:g.C]
						for j, v := range src {
							dst[j] += v
						}
					}
				}
			}
		}
	}
}

// GoPoolForward max-pools n samples of x into y (padding ignored), records
// in arg which window element (kh*K + kw) each maximum came from, then adds
// bias per channel (when not nil) and, when relu, applies max(., 0).
func GoPoolForward(g Window, n int, x, bias []float32, relu bool, y []float32, arg []uint8) {
	c := g.C
	for i := 0; i < n; i++ {
		xs := x[i*g.In() : (i+1)*g.In()]
		ys := y[i*g.Out() : (i+1)*g.Out()]
		as := arg[i*g.Out() : (i+1)*g.Out()]
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				o := (oh*g.Wo + ow) * c
				yr, ar := ys[o:o+c], as[o:o+c]
				first := (oh*g.S*g.W + ow*g.S) * c
				copy(yr, xs[first:first+c])
				clear(ar)
				for kh := 0; kh < g.K; kh++ {
					for kw := 0; kw < g.K; kw++ {
						base := ((oh*g.S+kh)*g.W + ow*g.S + kw) * c
						for ch, v := range xs[base : base+c] {
							if v > yr[ch] {
								yr[ch], ar[ch] = v, uint8(kh*g.K+kw)
							}
						}
					}
				}
				for ch := range yr {
					if bias != nil {
						yr[ch] += bias[ch]
					}
					if relu {
						yr[ch] = max(yr[ch], 0)
					}
				}
			}
		}
	}
}

// GoPoolBackward sets dx to the gradient of GoPoolForward: each output's dy
// goes to the input its maximum came from; with relu, outputs y that were
// cut to zero pass nothing.
func GoPoolBackward(g Window, n int, dy, y []float32, arg []uint8, relu bool, dx []float32) {
	c := g.C
	clear(dx[:n*g.In()])
	for i := 0; i < n; i++ {
		dxs := dx[i*g.In() : (i+1)*g.In()]
		off := i * g.Out()
		for j := 0; j < g.Out(); j++ {
			if relu && y[off+j] == 0 {
				continue
			}
			ch, pos := j%c, j/c
			oh, ow := pos/g.Wo, pos%g.Wo
			kh, kw := int(arg[off+j])/g.K, int(arg[off+j])%g.K
			dxs[((oh*g.S+kh)*g.W+ow*g.S+kw)*c+ch] += dy[off+j]
		}
	}
}

// GoColSums sets dst[j] to the sum over the m rows of the row-major (m, n)
// matrix a with row stride lda, rows added in order.
func GoColSums(dst, a []float32, m, n, lda int) {
	clear(dst[:n])
	for i := 0; i < m; i++ {
		for j, v := range a[i*lda : i*lda+n] {
			dst[j] += v
		}
	}
}

func checkColSums(dst, a []float32, m, n, lda int) {
	if m < 0 || n < 0 || lda < n || len(dst) < n || (m > 0 && len(a) < (m-1)*lda+n) {
		panic(fmt.Sprintf("kernels: bad ColSums arguments (%d x %d, lda %d, len(a) %d, len(dst) %d)", m, n, lda, len(a), len(dst)))
	}
}

// GoReLU sets y = max(x, 0).
func GoReLU(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = max(v, 0)
	}
}

// GoReLUBackward sets dx = dy where y > 0, else 0.
func GoReLUBackward(y, dy, dx []float32) {
	dy, dx = dy[:len(y)], dx[:len(y)]
	for i, v := range y {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// SmallMax is the largest K*K*C of the direct convolution kernels; their
// number of output channels must be a multiple of 8.
const SmallMax = 32

// Padded is the size of the scratch buffer the direct convolution kernels
// need: one zero-padded sample.
func (g Window) Padded() int { return (g.H + 2*g.P) * (g.W + 2*g.P) * g.C }

func (g Window) checkSmall(n, o, lx, lw, ly, ls int) {
	g.check(n)
	kkc := g.K * g.K * g.C
	if kkc > SmallMax || o < 8 || o%8 != 0 || lx < n*g.In() || lw < kkc*o || ly < n*g.Ho*g.Wo*o || ls < g.Padded() {
		panic(fmt.Sprintf("kernels: bad direct convolution arguments (window %+v, %d samples, %d outputs)", g, n, o))
	}
}

// GoConvSmallForward sets y (n, Ho, Wo, o) to the convolution of n samples
// of x with weights wT, laid out (K, K, C, o): a direct convolution for few
// input channels, no bias. scratch holds Padded() values.
func GoConvSmallForward(g Window, n int, x, wT []float32, o int, y, scratch []float32) {
	for i := 0; i < n; i++ {
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				yr := y[((i*g.Ho+oh)*g.Wo+ow)*o:][:o]
				clear(yr)
				g.taps(x[i*g.In():], oh, ow, func(t int, v float32) {
					for j, w := range wT[t*o : (t+1)*o] {
						yr[j] += v * w
					}
				})
			}
		}
	}
}

// GoConvSmallWeights sets dwT (K, K, C, o) to the weight gradient of
// GoConvSmallForward for output gradient dy, summed over the n samples.
func GoConvSmallWeights(g Window, n int, x, dy []float32, o int, dwT, scratch []float32) {
	clear(dwT[:g.K*g.K*g.C*o])
	for i := 0; i < n; i++ {
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				dr := dy[((i*g.Ho+oh)*g.Wo+ow)*o:][:o]
				g.taps(x[i*g.In():], oh, ow, func(t int, v float32) {
					for j, d := range dr {
						dwT[t*o+j] += v * d
					}
				})
			}
		}
	}
}

// PooledOut is the number of values of one sample of a direct
// convolution followed by a 2x2, stride-2 max-pool, with o channels.
func (g Window) PooledOut(o int) int { return (g.Ho / 2) * (g.Wo / 2) * o }

// ConvPoolScratch is the size of the scratch buffer ConvPoolForward and
// ConvPoolWeights need for o output channels: a padded sample, then one
// pooling window's four output pixels or two values per pooled output.
func (g Window) ConvPoolScratch(o int) int { return g.Padded() + max(4*o, 2*g.PooledOut(o)) }

func (g Window) checkConvPool(n, o, lx, lw, lbias, ly, larg, ls int) {
	g.check(n)
	kkc := g.K * g.K * g.C
	out := n * g.PooledOut(o)
	if kkc > SmallMax || o < 8 || o%8 != 0 || g.Ho%2 != 0 || g.Wo%2 != 0 || lx < n*g.In() || lw < kkc*o ||
		(lbias != 0 && lbias < o) || ly < out || larg < out || ls < g.ConvPoolScratch(o) {
		panic(fmt.Sprintf("kernels: bad convolution and pool arguments (window %+v, %d samples, %d outputs)", g, n, o))
	}
}

// GoConvPoolForward is GoConvSmallForward followed by GoPoolForward with a
// 2x2, stride-2 window (bias, when not nil, and ReLU after the pool),
// pooling window by window: y and arg are the pooled output (n, Ho/2,
// Wo/2, o). Ho and Wo are even. scratch holds ConvPoolScratch(o) values.
// The same bits as the two in turn.
func GoConvPoolForward(g Window, n int, x, wT []float32, o int, bias []float32, relu bool, y []float32, arg []uint8, scratch []float32) {
	tile := scratch[g.Padded():][:4*o]
	hq, wq := g.Ho/2, g.Wo/2
	for i := 0; i < n; i++ {
		xs := x[i*g.In():]
		for ph := 0; ph < hq; ph++ {
			for pw := 0; pw < wq; pw++ {
				for q := 0; q < 4; q++ {
					tr := tile[q*o : (q+1)*o]
					clear(tr)
					g.taps(xs, 2*ph+q/2, 2*pw+q%2, func(t int, v float32) {
						for j, w := range wT[t*o : (t+1)*o] {
							tr[j] += v * w
						}
					})
				}
				off := ((i*hq+ph)*wq + pw) * o
				yr, ar := y[off:off+o], arg[off:off+o]
				copy(yr, tile[:o])
				clear(ar)
				for q := 1; q < 4; q++ {
					for j, v := range tile[q*o : (q+1)*o] {
						if v > yr[j] {
							yr[j], ar[j] = v, uint8(q)
						}
					}
				}
				for j := range yr {
					if bias != nil {
						yr[j] += bias[j]
					}
					if relu {
						yr[j] = max(yr[j], 0)
					}
				}
			}
		}
	}
}

// GoConvPoolWeights sets dwT (K, K, C, o) and db (o, when not nil) to the
// weight and bias gradients of GoConvPoolForward for the pooled output y
// and its gradient dy: GoPoolBackward's routing, then GoConvSmallWeights
// and GoColSums, without the routed gradient in memory. The same bits as
// the three in turn. An empty db: no bias.
func GoConvPoolWeights(g Window, n int, x, dy, y []float32, arg []uint8, relu bool, o int, dwT, db, scratch []float32) {
	d := scratch[g.Padded():][:o]
	clear(dwT[:g.K*g.K*g.C*o])
	if len(db) > 0 {
		clear(db[:o])
	}
	wq := g.Wo / 2
	for i := 0; i < n; i++ {
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				off := i*g.PooledOut(o) + (oh/2*wq+ow/2)*o
				q := uint8(oh%2*2 + ow%2)
				for j := range d {
					d[j] = 0
					if arg[off+j] == q && !(relu && y[off+j] == 0) {
						d[j] = dy[off+j]
					}
				}
				g.taps(x[i*g.In():], oh, ow, func(t int, v float32) {
					for j, dv := range d {
						dwT[t*o+j] += v * dv
					}
				})
				if len(db) > 0 {
					for j, dv := range d {
						db[j] += dv
					}
				}
			}
		}
	}
}

// taps calls f(t, x) for every tap t = (kh*K + kw)*C + c of output pixel
// (oh, ow) that falls inside the sample (padding contributes nothing).
func (g Window) taps(xs []float32, oh, ow int, f func(t int, v float32)) {
	for kh := 0; kh < g.K; kh++ {
		ih := oh*g.S - g.P + kh
		if ih < 0 || ih >= g.H {
			continue
		}
		for kw := 0; kw < g.K; kw++ {
			iw := ow*g.S - g.P + kw
			if iw < 0 || iw >= g.W {
				continue
			}
			for c := 0; c < g.C; c++ {
				f((kh*g.K+kw)*g.C+c, xs[(ih*g.W+iw)*g.C+c])
			}
		}
	}
}

// GoChanMoments adds, for each channel j of the row-major (m, c) matrices a
// and b, the sum over rows of a to sa[j] and of a*(b - mu[j]) to sab[j], in
// float64, rows in order. Batch normalisation takes its statistics with it:
// a = b = x and mu = 0 give the sums of x and x^2; a = dy, b = x and mu the
// batch mean give the sums of dy and dy*(x - mean).
func GoChanMoments(a, b []float32, m, c int, mu []float32, sa, sab []float64) {
	for i := 0; i < m; i++ {
		ar, br := a[i*c:][:c], b[i*c:][:c]
		for j := range ar {
			av := float64(ar[j])
			sa[j] += av
			sab[j] += float64(av * (float64(br[j]) - float64(mu[j])))
		}
	}
}

func checkChan(m, c int, lens ...int) {
	if m < 0 || c < 1 {
		panic(fmt.Sprintf("kernels: bad channel kernel arguments (%d rows, %d channels)", m, c))
	}
	for i, l := range lens {
		need := m * c
		if i >= 3 {
			need = c // per-channel vectors after the three matrices
		}
		if l >= 0 && l < need {
			panic(fmt.Sprintf("kernels: buffer of %d values, need %d (%d rows, %d channels)", l, need, m, c))
		}
	}
}

// GoChanNorm sets y = (x - mu)*s + t for each channel of the row-major
// (m, c) matrix x: batch normalisation's forward pass with s = gamma/std
// and t = beta.
func GoChanNorm(y, x []float32, m, c int, mu, s, t []float32) {
	for i := 0; i < m; i++ {
		xr, yr := x[i*c:][:c], y[i*c:][:c]
		for j, v := range xr {
			yr[j] = float32((v-mu[j])*s[j]) + t[j]
		}
	}
}

// GoChanNormBackward sets dx = a*dy + b*(x - mu) + k for each channel of
// the row-major (m, c) matrices: batch normalisation's input gradient.
func GoChanNormBackward(dx, dy, x []float32, m, c int, mu, a, b, k []float32) {
	for i := 0; i < m; i++ {
		xr, dyr, dxr := x[i*c:][:c], dy[i*c:][:c], dx[i*c:][:c]
		for j, v := range xr {
			dxr[j] = float32(a[j]*dyr[j]) + float32(b[j]*(v-mu[j])) + k[j]
		}
	}
}

// GoAdd sets dst = a + b element-wise (dst may be a or b).
func GoAdd(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// Batch normalisation and the residual add with the ReLU that follows
// them fused in. Forward applies max(., 0) to the result. Backward passes
// dy only where batch norm's output was positive, recomputing it from x
// as GoChanNorm does (same operations, same bits), so that ReLU's
// backward needs no pass of its own and the ReLU's output gradient is
// neither read nor written.

// GoChanNormReLU sets y = max((x - mu)*s + t, 0) (see GoChanNorm).
func GoChanNormReLU(y, x []float32, m, c int, mu, s, t []float32) {
	for i := 0; i < m; i++ {
		xr, yr := x[i*c:][:c], y[i*c:][:c]
		for j, v := range xr {
			if z := float32((v-mu[j])*s[j]) + t[j]; z < 0 {
				yr[j] = 0
			} else {
				yr[j] = z
			}
		}
	}
}

// GoChanMomentsReLU is GoChanMoments with a taken as 0 wherever
// (b - mu)*s + t is not positive: the sums of ReLU's input gradient,
// given its output gradient a.
func GoChanMomentsReLU(a, b []float32, m, c int, mu, s, t []float32, sa, sab []float64) {
	for i := 0; i < m; i++ {
		ar, br := a[i*c:][:c], b[i*c:][:c]
		for j := range ar {
			av := 0.0
			if float32(float32((br[j]-mu[j])*s[j])+t[j]) > 0 {
				av = float64(ar[j])
			}
			sa[j] += av
			sab[j] += float64(av * (float64(br[j]) - float64(mu[j])))
		}
	}
}

// GoChanNormBackwardReLU is GoChanNormBackward with dy taken as 0 wherever
// (x - mu)*s + t is not positive.
func GoChanNormBackwardReLU(dx, dy, x []float32, m, c int, mu, a, b, k, s, t []float32) {
	for i := 0; i < m; i++ {
		xr, dyr, dxr := x[i*c:][:c], dy[i*c:][:c], dx[i*c:][:c]
		for j, v := range xr {
			var d float32
			if float32(float32((v-mu[j])*s[j])+t[j]) > 0 {
				d = dyr[j]
			}
			dxr[j] = float32(a[j]*d) + float32(b[j]*(v-mu[j])) + k[j]
		}
	}
}

// GoAddReLU sets dst = max(a + b, 0) element-wise (dst may be a or b).
func GoAddReLU(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		if v := a[i] + b[i]; v < 0 {
			dst[i] = 0
		} else {
			dst[i] = v
		}
	}
}
