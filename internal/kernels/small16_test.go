package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSmall16 holds the bf16 direct kernels to float64 sums of the same
// bf16-rounded operands (the forward within float32's rounding of at most
// 32 products, the weight gradient within that of its n*Ho*Wo sums), to
// the float32 kernels within bf16's rounding of both operands (2^-7 of the
// sum of the products' magnitudes: each operand's 8-bit significand is
// within 2^-8 of its value, so a product within about 2^-7), and the fused pool to the unfused kernels
// bit for bit. Shapes cover one and several input channels, odd output
// widths (a pixel pair with one pixel), stride 2, K*K*C above 9 (several
// tap groups) and 16, 32 and 48 output channels (both register widths).
func TestSmall16(t *testing.T) {
	if !Small16(16) {
		t.Skip("no AVX512-BF16 on this CPU (or no cgo, or AVX-512 capped): the bf16 direct kernels do not run here, and bf16 is refused")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		g Window
		o int
	}{{conv(28, 28, 1, 3, 1, 1), 32}, {conv(9, 7, 1, 3, 1, 1), 16}, {conv(10, 10, 3, 3, 1, 1), 48},
		{conv(11, 11, 1, 5, 2, 2), 16}, {conv(8, 9, 2, 3, 2, 1), 32}, {conv(6, 6, 1, 3, 1, 1), 16}} {
		g, o := c.g, c.o
		const n = 3
		kkc, hwo := g.K*g.K*g.C, g.Ho*g.Wo
		what := fmt.Sprintf("%+v, %d outputs", g, o)
		x, w, dy := randf(rng, n*g.In()), randf(rng, o*kkc), randf(rng, n*hwo*o)
		xr, wr, dyr := rounded(x), rounded(w), rounded(dy)
		w16 := make([]uint32, g.Small16Pairs(o))
		PackSmall16(g, o, w, w16)
		scratch := make([]uint16, g.Small16Scratch(o, false))
		for i := range scratch {
			scratch[i] = uint16(rng.Uint32()) // stale values must not leak in
		}
		y, dwT := make([]float32, n*hwo*o), make([]float32, kkc*o)
		ConvSmallForward16(g, n, x, w16, o, y, scratch)
		ConvSmallWeights16(g, n, x, dy, o, dwT, scratch)

		// float64 references: of the rounded operands, and their
		// magnitudes' sums for the bounds.
		wT, wTr := make([]float32, kkc*o), make([]float32, kkc*o)
		transpose32(wT, w, o, kkc)
		transpose32(wTr, wr, o, kkc)
		ref, mag := directRef(g, n, xr, wTr, o)
		yf := make([]float32, len(y))
		GoConvSmallForward(g, n, x, wT, o, yf, nil)
		for i := range y {
			if d := math.Abs(float64(y[i]) - ref[i]); d > 32*0x1p-24*mag[i]+1e-30 {
				t.Fatalf("%s: forward[%d] = %v, float64 sum of the bf16 operands %v", what, i, y[i], ref[i])
			}
			if d := math.Abs(float64(y[i] - yf[i])); d > 0x1p-7*mag[i]+1e-30 {
				t.Fatalf("%s: forward[%d] = %v, float32 kernel %v: beyond bf16's rounding", what, i, y[i], yf[i])
			}
		}
		dref, dmag := weightsRef(g, n, xr, dyr, o)
		dwf := make([]float32, kkc*o)
		GoConvSmallWeights(g, n, x, dy, o, dwf, nil)
		for i := range dwT {
			if d := math.Abs(float64(dwT[i]) - dref[i]); d > float64(n*hwo)*0x1p-24*dmag[i]+1e-30 {
				t.Fatalf("%s: weights[%d] = %v, float64 sum of the bf16 operands %v", what, i, dwT[i], dref[i])
			}
			if d := math.Abs(float64(dwT[i] - dwf[i])); d > 0x1p-7*dmag[i]+1e-30 {
				t.Fatalf("%s: weights[%d] = %v, float32 kernel %v: beyond bf16's rounding", what, i, dwT[i], dwf[i])
			}
		}

		// The fused pool: ConvSmallForward16 then PoolForward, and
		// PoolBackward then ConvSmallWeights16, bit for bit; the bias's
		// gradient as ColSums of the routed float32 gradient.
		if g.Ho%2 != 0 || g.Wo%2 != 0 {
			continue
		}
		pw := Window{H: g.Ho, W: g.Wo, C: o, K: 2, S: 2, Ho: g.Ho / 2, Wo: g.Wo / 2}
		ps := make([]uint16, g.Small16Scratch(o, true))
		for _, v := range []struct{ bias, relu bool }{{true, true}, {false, false}} {
			what := fmt.Sprintf("%s, bias %v, relu %v", what, v.bias, v.relu)
			var bias, db []float32
			if v.bias {
				bias, db = randf(rng, o), make([]float32, o)
			}
			py, arg := make([]float32, n*pw.Out()), make([]uint8, n*pw.Out())
			ConvPoolForward16(g, n, x, w16, o, bias, v.relu, py, arg, ps)
			yr, ar := make([]float32, len(py)), make([]uint8, len(arg))
			PoolForward(pw, n, y, bias, v.relu, yr, ar)
			equal(t, what+": pooled output", py, yr)
			if !bytes.Equal(arg, ar) {
				t.Fatalf("%s: argmax differs", what)
			}
			pdy := randf(rng, n*pw.Out())
			pdw := make([]float32, kkc*o)
			ConvPoolWeights16(g, n, x, pdy, py, arg, v.relu, o, pdw, db, ps)
			routed, rdw := make([]float32, n*hwo*o), make([]float32, kkc*o)
			PoolBackward(pw, n, pdy, py, arg, v.relu, routed)
			ConvSmallWeights16(g, n, x, routed, o, rdw, scratch)
			equal(t, what+": weight gradient", pdw, rdw)
			if v.bias {
				dbr := make([]float32, o)
				ColSums(dbr, routed, n*hwo, o, o)
				for j := range db {
					if d := math.Abs(float64(db[j] - dbr[j])); d > 1e-4 {
						t.Fatalf("%s: bias gradient[%d] = %v, column sums %v", what, j, db[j], dbr[j])
					}
				}
			}
		}
	}
}

func rounded(s []float32) []float32 {
	h, f := make([]uint16, len(s)), make([]float32, len(s))
	GoToBF16(h, s)
	for i, v := range h {
		f[i] = math.Float32frombits(uint32(v) << 16)
	}
	return f
}

func transpose32(dst, src []float32, m, n int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			dst[j*m+i] = src[i*n+j]
		}
	}
}

// at returns x's value at padded position (ih, iw) of sample i, channel c
// (0 in the border).
func at(g Window, x []float32, i, ih, iw, c int) float64 {
	ih, iw = ih-g.P, iw-g.P
	if ih < 0 || iw < 0 || ih >= g.H || iw >= g.W {
		return 0
	}
	return float64(x[((i*g.H+ih)*g.W+iw)*g.C+c])
}

// directRef is the convolution in float64, and per output the sum of its
// products' magnitudes.
func directRef(g Window, n int, x, wT []float32, o int) (ref, mag []float64) {
	ref, mag = make([]float64, n*g.Ho*g.Wo*o), make([]float64, n*g.Ho*g.Wo*o)
	for i := 0; i < n; i++ {
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				for j := 0; j < o; j++ {
					k := ((i*g.Ho+oh)*g.Wo+ow)*o + j
					for kh := 0; kh < g.K; kh++ {
						for kw := 0; kw < g.K; kw++ {
							for c := 0; c < g.C; c++ {
								p := at(g, x, i, oh*g.S+kh, ow*g.S+kw, c) * float64(wT[((kh*g.K+kw)*g.C+c)*o+j])
								ref[k] += p
								mag[k] += math.Abs(p)
							}
						}
					}
				}
			}
		}
	}
	return ref, mag
}

// weightsRef is the weight gradient (K*K*C, o) in float64, and the sums of
// its products' magnitudes.
func weightsRef(g Window, n int, x, dy []float32, o int) (ref, mag []float64) {
	kkc := g.K * g.K * g.C
	ref, mag = make([]float64, kkc*o), make([]float64, kkc*o)
	for i := 0; i < n; i++ {
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				for kh := 0; kh < g.K; kh++ {
					for kw := 0; kw < g.K; kw++ {
						for c := 0; c < g.C; c++ {
							xv := at(g, x, i, oh*g.S+kh, ow*g.S+kw, c)
							for j := 0; j < o; j++ {
								p := xv * float64(dy[((i*g.Ho+oh)*g.Wo+ow)*o+j])
								t := ((kh*g.K+kw)*g.C+c)*o + j
								ref[t] += p
								mag[t] += math.Abs(p)
							}
						}
					}
				}
			}
		}
	}
	return ref, mag
}
