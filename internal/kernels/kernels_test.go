package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randf(rng *rand.Rand, n int) []float32 {
	a := make([]float32, n)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	return a
}

func equal(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s[%d] = %v, reference %v", what, i, got[i], want[i])
		}
	}
}

func conv(h, w, c, k, s, p int) Window {
	return Window{H: h, W: w, C: c, K: k, S: s, P: p, Ho: (h+2*p-k)/s + 1, Wo: (w+2*p-k)/s + 1}
}

// The exported kernels (C unless purego) give exactly what the plain Go
// references give: they copy, compare and add the same values in the same
// order.
func TestIm2colCol2im(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range []Window{
		conv(28, 28, 1, 3, 1, 1), conv(14, 14, 32, 3, 1, 1), conv(7, 6, 3, 3, 2, 0),
		conv(5, 6, 2, 2, 1, 1), conv(4, 4, 3, 1, 1, 0), conv(6, 5, 2, 5, 1, 2),
	} {
		const n = 3
		x := randf(rng, n*g.In())
		col, ref := make([]float32, n*g.Cols()), make([]float32, n*g.Cols())
		for i := range col {
			col[i] = 7 // stale values must be overwritten, padding zeroed
		}
		Im2col(g, n, x, col)
		GoIm2col(g, n, x, ref)
		equal(t, "im2col", col, ref)

		dcol := randf(rng, n*g.Cols())
		dx, dref := randf(rng, n*g.In()), make([]float32, n*g.In())
		Col2im(g, n, dcol, dx)
		GoCol2im(g, n, dcol, dref)
		equal(t, "col2im", dx, dref)
	}
}

func TestPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := func(h, w, c, k, s int) Window {
		return Window{H: h, W: w, C: c, K: k, S: s, Ho: (h-k)/s + 1, Wo: (w-k)/s + 1}
	}
	for _, g := range []Window{pool(28, 28, 32, 2, 2), pool(7, 7, 5, 2, 2), pool(5, 5, 2, 3, 1), pool(6, 4, 3, 2, 1)} {
		for _, fused := range []bool{false, true} {
			const n = 2
			x := randf(rng, n*g.In())
			// Ties: the first maximum in window order wins, in both.
			x[1], x[1+g.C] = 3, 3
			var bias []float32
			if fused {
				bias = randf(rng, g.C)
			}
			y, yr := make([]float32, n*g.Out()), make([]float32, n*g.Out())
			a, ar := make([]uint8, n*g.Out()), make([]uint8, n*g.Out())
			PoolForward(g, n, x, bias, fused, y, a)
			GoPoolForward(g, n, x, bias, fused, yr, ar)
			equal(t, "pool", y, yr)
			for i := range a {
				if a[i] != ar[i] {
					t.Fatalf("%+v: argmax[%d] = %d, reference %d", g, i, a[i], ar[i])
				}
			}
			dy := randf(rng, n*g.Out())
			dx, dxr := randf(rng, n*g.In()), make([]float32, n*g.In())
			PoolBackward(g, n, dy, y, a, fused, dx)
			GoPoolBackward(g, n, dy, yr, ar, fused, dxr)
			equal(t, "pool backward", dx, dxr)
		}
	}
}

func TestColSumsReLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	a := randf(rng, 37*19)
	s, sr := randf(rng, 19), make([]float32, 19)
	ColSums(s, a, 37, 19, 19)
	GoColSums(sr, a, 37, 19, 19)
	equal(t, "colsums", s, sr)
	// A column range of a wider matrix: 36 rows of columns 5..12.
	ColSums(s, a[5:], 36, 7, 19)
	for j := 0; j < 7; j++ {
		var want float32
		for i := 0; i < 36; i++ {
			want += a[i*19+5+j]
		}
		if s[j] != want {
			t.Fatalf("strided colsums[%d] = %v, want %v", j, s[j], want)
		}
	}

	y, yr := make([]float32, len(a)), make([]float32, len(a))
	ReLU(a, y)
	GoReLU(a, yr)
	equal(t, "relu", y, yr)
	dy := randf(rng, len(a))
	dx, dxr := make([]float32, len(a)), make([]float32, len(a))
	ReLUBackward(y, dy, dx)
	GoReLUBackward(yr, dy, dxr)
	equal(t, "relu backward", dx, dxr)
}

func TestBadArguments(t *testing.T) {
	g := conv(4, 4, 2, 3, 1, 1)
	defer func() {
		if recover() == nil {
			t.Error("Im2col into a short buffer did not panic")
		}
	}()
	Im2col(g, 2, make([]float32, 2*g.In()), make([]float32, g.Cols()))
}

func TestConvSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		g Window
		o int
	}{{conv(28, 28, 1, 3, 1, 1), 32}, {conv(7, 6, 3, 3, 2, 0), 8}, {conv(5, 6, 2, 2, 1, 1), 40}, {conv(6, 5, 1, 5, 1, 2), 16},
		// resnets' 1x1 projections: no padding, read in place.
		{conv(8, 7, 16, 1, 2, 0), 32}, {conv(9, 9, 32, 1, 2, 0), 64}} {
		g, o := c.g, c.o
		const n = 2
		kkc := g.K * g.K * g.C
		x, wT := randf(rng, n*g.In()), randf(rng, kkc*o)
		dy := randf(rng, n*g.Ho*g.Wo*o)
		y, yr := randf(rng, n*g.Ho*g.Wo*o), make([]float32, n*g.Ho*g.Wo*o)
		dw, dwr := randf(rng, kkc*o), make([]float32, kkc*o)
		scratch := randf(rng, g.Padded()) // stale values must not leak into the border
		ConvSmallForward(g, n, x, wT, o, y, scratch)
		GoConvSmallForward(g, n, x, wT, o, yr, nil)
		ConvSmallWeights(g, n, x, dy, o, dw, scratch)
		GoConvSmallWeights(g, n, x, dy, o, dwr, nil)
		close := func(what string, got, want []float32) {
			for i := range want {
				if d := got[i] - want[i]; d > 1e-3 || d < -1e-3 {
					t.Fatalf("%+v, %d outputs: %s[%d] = %v, reference %v", g, o, what, i, got[i], want[i])
				}
			}
		}
		close("forward", y, yr)
		close("weights", dw, dwr)
	}
}

// The fused convolution and pool give the bits of the kernels they fuse,
// in turn: ConvPoolForward those of ConvSmallForward then PoolForward,
// ConvPoolWeights those of PoolBackward, ConvSmallWeights and ColSums; and
// so do their Go twins with the Go kernels. Channel counts cover both
// block widths of the C kernels (8 and 16 channels; with AVX-512, 16 and
// 32: 16, 32 and 48 take those forms, 8 and 24 the AVX2 ones), and K*K*C
// above 9 (several tap groups).
func TestConvPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		g Window
		o int
	}{{conv(28, 28, 1, 3, 1, 1), 32}, {conv(8, 11, 3, 3, 2, 1), 24}, {conv(7, 9, 2, 2, 1, 0), 8}, {conv(10, 10, 1, 5, 1, 2), 16}, {conv(6, 8, 2, 3, 1, 1), 48}} {
		for _, v := range []struct{ bias, relu bool }{{true, true}, {false, false}, {true, false}} {
			g, o := c.g, c.o
			const n = 3
			kkc := g.K * g.K * g.C
			pw := Window{H: g.Ho, W: g.Wo, C: o, K: 2, S: 2, Ho: g.Ho / 2, Wo: g.Wo / 2}
			x, wT := randf(rng, n*g.In()), randf(rng, kkc*o)
			var bias []float32
			if v.bias {
				bias = randf(rng, o)
			}
			dy := randf(rng, n*pw.Out())
			scratch := randf(rng, g.ConvPoolScratch(o)) // stale values must not matter
			for _, native := range []bool{true, false} {
				fwd, pool, small := ConvPoolForward, PoolForward, ConvSmallForward
				dw, route, smallW, sums := ConvPoolWeights, PoolBackward, ConvSmallWeights, ColSums
				if !native {
					fwd, pool, small = GoConvPoolForward, GoPoolForward, GoConvSmallForward
					dw, route, smallW, sums = GoConvPoolWeights, GoPoolBackward, GoConvSmallWeights, GoColSums
				}
				what := fmt.Sprintf("%+v, %d outputs, bias %v, relu %v, native %v", g, o, v.bias, v.relu, native)
				y, arg := make([]float32, n*pw.Out()), make([]uint8, n*pw.Out())
				fwd(g, n, x, wT, o, bias, v.relu, y, arg, scratch)
				full := make([]float32, n*g.Ho*g.Wo*o)
				yr, ar := make([]float32, n*pw.Out()), make([]uint8, n*pw.Out())
				small(g, n, x, wT, o, full, scratch)
				pool(pw, n, full, bias, v.relu, yr, ar)
				equal(t, what+": pooled output", y, yr)
				if !bytes.Equal(arg, ar) {
					t.Fatalf("%s: argmax differs", what)
				}

				dwT, db := randf(rng, kkc*o), randf(rng, o)
				if !v.bias {
					db = nil
				}
				dw(g, n, x, dy, y, arg, v.relu, o, dwT, db, scratch)
				dfull, dwr, dbr := make([]float32, len(full)), make([]float32, kkc*o), make([]float32, o)
				route(pw, n, dy, y, arg, v.relu, dfull)
				smallW(g, n, x, dfull, o, dwr, scratch)
				equal(t, what+": weight gradient", dwT, dwr)
				if v.bias {
					sums(dbr, dfull, n*g.Ho*g.Wo, o, o)
					equal(t, what+": bias gradient", db, dbr)
				}
			}
		}
	}
}

// The batch-norm channel kernels and Add, bit for bit against their Go
// twins, with channel counts that leave vector remainders and a and b the
// same buffer (the forward statistics).
func TestChannelKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []int{1, 3, 16, 32, 37, 48, 64} {
		const m = 29
		x, dy := randf(rng, m*c), randf(rng, m*c)
		for i := range x {
			x[i] = 3 + 2*x[i] // a mean far from zero
		}
		mu, s, tt, k := randf(rng, c), randf(rng, c), randf(rng, c), randf(rng, c)
		zero := make([]float32, c)
		for _, v := range []struct {
			a, b, mu []float32
		}{{x, x, zero}, {dy, x, mu}} {
			sa, sab := make([]float64, c), make([]float64, c)
			ra, rab := make([]float64, c), make([]float64, c)
			for j := range sa {
				sa[j], ra[j] = 1.5, 1.5 // the kernel adds to what is there
			}
			ChanMoments(v.a, v.b, m, c, v.mu, sa, sab)
			GoChanMoments(v.a, v.b, m, c, v.mu, ra, rab)
			for j := range sa {
				if sa[j] != ra[j] || sab[j] != rab[j] {
					t.Fatalf("c %d: moments[%d] = %v, %v, reference %v, %v", c, j, sa[j], sab[j], ra[j], rab[j])
				}
			}
			// A plain float64 restatement: the sums are right, not only equal.
			for j := 0; j < c; j++ {
				var wa, wab float64 = 1.5, 0
				for i := 0; i < m; i++ {
					wa += float64(v.a[i*c+j])
					wab += float64(v.a[i*c+j]) * (float64(v.b[i*c+j]) - float64(v.mu[j]))
				}
				if d := sa[j] - wa; d > 1e-9 || d < -1e-9 {
					t.Fatalf("c %d: sum[%d] = %v, want %v", c, j, sa[j], wa)
				}
				if d := sab[j] - wab; d > 1e-9*(1+abs64(wab)) || d < -1e-9*(1+abs64(wab)) {
					t.Fatalf("c %d: sum of products[%d] = %v, want %v", c, j, sab[j], wab)
				}
			}
		}
		y, yr := randf(rng, m*c), make([]float32, m*c)
		ChanNorm(y, x, m, c, mu, s, tt)
		GoChanNorm(yr, x, m, c, mu, s, tt)
		equal(t, "chan norm", y, yr)
		dx, dxr := randf(rng, m*c), make([]float32, m*c)
		ChanNormBackward(dx, dy, x, m, c, mu, s, tt, k)
		GoChanNormBackward(dxr, dy, x, m, c, mu, s, tt, k)
		equal(t, "chan norm backward", dx, dxr)
		// The fused ReLU: the bits of ReLU after the kernel forward, and of
		// ReLU's backward before it, in C and in Go.
		for _, impl := range []struct {
			name    string
			norm    func(y, x []float32, m, c int, mu, s, t []float32)
			moments func(a, b []float32, m, c int, mu, s, t []float32, sa, sab []float64)
			bwd     func(dx, dy, x []float32, m, c int, mu, a, b, k, s, t []float32)
			add     func(dst, a, b []float32)
		}{{"C", ChanNormReLU, ChanMomentsReLU, ChanNormBackwardReLU, AddReLU}, {"Go", GoChanNormReLU, GoChanMomentsReLU, GoChanNormBackwardReLU, GoAddReLU}} {
			pre, want := make([]float32, m*c), make([]float32, m*c)
			GoChanNorm(pre, x, m, c, mu, s, tt)
			GoReLU(pre, want)
			got := make([]float32, m*c)
			impl.norm(got, x, m, c, mu, s, tt)
			equal(t, impl.name+" chan norm relu", got, want)
			masked := make([]float32, m*c)
			GoReLUBackward(want, dy, masked)
			sa, sab := make([]float64, c), make([]float64, c)
			ra, rab := make([]float64, c), make([]float64, c)
			impl.moments(dy, x, m, c, mu, s, tt, sa, sab)
			GoChanMoments(masked, x, m, c, mu, ra, rab)
			for j := range sa {
				if sa[j] != ra[j] || sab[j] != rab[j] {
					t.Fatalf("%s c %d: moments relu[%d] = %v, %v, reference %v, %v", impl.name, c, j, sa[j], sab[j], ra[j], rab[j])
				}
			}
			gotdx, wantdx := make([]float32, m*c), make([]float32, m*c)
			impl.bwd(gotdx, dy, x, m, c, mu, s, tt, k, s, tt)
			GoChanNormBackward(wantdx, masked, x, m, c, mu, s, tt, k)
			equal(t, impl.name+" chan norm backward relu", gotdx, wantdx)
			GoAdd(want, x, dy)
			GoReLU(want, want)
			impl.add(got, x, dy)
			equal(t, impl.name+" add relu", got, want)
		}
		sum, sumr := make([]float32, m*c), make([]float32, m*c)
		Add(sum, x, dy)
		GoAdd(sumr, x, dy)
		equal(t, "add", sum, sumr)
		Add(dy, dy, x) // in place
		equal(t, "add in place", dy, sumr)
	}
}

// TestChanMomentsSquares: forward's moments (a and b the same buffer, a
// shift of +0) take a fused multiply-add in C; its bits must be the Go
// twin's for every value, signed zeros, subnormals, the largest floats,
// infinities and NaN included. A shift of -0 must not take that path.
func TestChanMomentsSquares(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	special := []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		1e-30, math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1, -3.5}
	for _, c := range []int{16, 48, 50} {
		const m = 37
		x := randf(rng, m*c)
		for i := range x {
			if rng.IntN(3) == 0 {
				x[i] = special[rng.IntN(len(special))]
			} else {
				x[i] = 1e3 * (x[i] - 0.5)
			}
		}
		for i := 0; i < m; i++ {
			x[i*c+1] = float32(math.Copysign(0, -1)) // a channel of -0: the shift's sign shows
		}
		negZero := make([]float32, c)
		for j := range negZero {
			negZero[j] = float32(math.Copysign(0, -1))
		}
		for _, mu := range [][]float32{make([]float32, c), negZero} {
			sa, sab := make([]float64, c), make([]float64, c)
			ra, rab := make([]float64, c), make([]float64, c)
			for j := range sab {
				// what is there already, -0 included
				v := []float64{0, math.Copysign(0, -1), 2.5}[j%3]
				sa[j], sab[j], ra[j], rab[j] = v, v, v, v
			}
			ChanMoments(x, x, m, c, mu, sa, sab)
			GoChanMoments(x, x, m, c, mu, ra, rab)
			for j := range sa {
				if !same64(sa[j], ra[j]) || !same64(sab[j], rab[j]) {
					t.Fatalf("c %d, shift %v: moments[%d] = %v, %v, Go %v, %v", c, mu[0], j, sa[j], sab[j], ra[j], rab[j])
				}
			}
		}
	}
}

// same64 reports whether a and b are the same bits, or both NaN.
func same64(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || (math.IsNaN(a) && math.IsNaN(b))
}

func abs64(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
