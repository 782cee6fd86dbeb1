//go:build cgo && !purego

package dnnl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
)

func rnd(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = rng.Float32()*2 - 1
	}
	return s
}

func rounded(s []float32) []float32 {
	r := make([]float32, len(s))
	RoundBF16(r, s)
	return r
}

// relErr is the norm-wise relative error ||got-want|| / ||want||.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// refConv computes forward, backward-data and backward-weights of shape s
// in float64 with plain loops.
func refConv(s ConvShape, x, w, dy []float32) (y, dx, dw []float64) {
	ho, wo := s.Ho(), s.Wo()
	y = make([]float64, s.YLen())
	dx = make([]float64, s.XLen())
	dw = make([]float64, s.WLen())
	for n := 0; n < s.N; n++ {
		for oh := 0; oh < ho; oh++ {
			for ow := 0; ow < wo; ow++ {
				for o := 0; o < s.O; o++ {
					yi := ((n*ho+oh)*wo+ow)*s.O + o
					var acc float64
					g := float64(dy[yi])
					for kh := 0; kh < s.K; kh++ {
						ih := oh*s.S - s.P + kh
						if ih < 0 || ih >= s.H {
							continue
						}
						for kw := 0; kw < s.K; kw++ {
							iw := ow*s.S - s.P + kw
							if iw < 0 || iw >= s.W {
								continue
							}
							xi := ((n*s.H+ih)*s.W + iw) * s.C
							wi := ((o*s.K+kh)*s.K + kw) * s.C
							for c := 0; c < s.C; c++ {
								acc += float64(x[xi+c]) * float64(w[wi+c])
								dx[xi+c] += g * float64(w[wi+c])
								dw[wi+c] += g * float64(x[xi+c])
							}
						}
					}
					y[yi] = acc
				}
			}
		}
	}
	return y, dx, dw
}

var convShapes = []ConvShape{
	{N: 2, H: 28, W: 28, C: 1, O: 8, K: 3, S: 1, P: 1},    // first layer, one channel
	{N: 2, H: 16, W: 16, C: 3, O: 16, K: 3, S: 1, P: 1},   // RGB
	{N: 2, H: 15, W: 15, C: 8, O: 16, K: 3, S: 2, P: 1},   // stride 2, pad 1, odd size
	{N: 2, H: 14, W: 14, C: 16, O: 32, K: 1, S: 2, P: 0},  // 1x1 projection
	{N: 2, H: 8, W: 8, C: 16, O: 16, K: 3, S: 1, P: 1},    // 16 -> 16
	{N: 2, H: 14, W: 14, C: 32, O: 64, K: 3, S: 1, P: 1},  // 32 -> 64 (the CNN's conv2)
	{N: 3, H: 7, W: 9, C: 5, O: 7, K: 5, S: 1, P: 2},      // odd everything
	{N: 1, H: 6, W: 6, C: 4, O: 3, K: 3, S: 3, P: 0},      // stride = kernel
	{N: 2, H: 10, W: 10, C: 64, O: 64, K: 3, S: 1, P: 0},  // no padding
	{N: 2, H: 9, W: 9, C: 16, O: 24, K: 3, S: 2, P: 0},    // stride 2 without padding
	{N: 2, H: 8, W: 8, C: 128, O: 256, K: 1, S: 2, P: 0},  // wide projection
	{N: 2, H: 4, W: 4, C: 256, O: 256, K: 3, S: 1, P: 1},  // deep, small image
	{N: 4, H: 32, W: 32, C: 3, O: 16, K: 3, S: 1, P: 1},   // CIFAR first layer
	{N: 2, H: 12, W: 12, C: 24, O: 40, K: 3, S: 2, P: 1},  // channels off 16
	{N: 2, H: 5, W: 5, C: 2, O: 1, K: 5, S: 1, P: 0},      // one output pixel, one channel
	{N: 2, H: 16, W: 16, C: 32, O: 16, K: 3, S: 1, P: 1},  // narrowing
	{N: 2, H: 14, W: 14, C: 64, O: 128, K: 3, S: 2, P: 1}, // downsampling
}

func bf16OK(t testing.TB) {
	if ok, missing := HasBF16(); !ok {
		t.Skip(missing)
	}
}

func TestConv(t *testing.T) {
	for _, s := range convShapes {
		for _, typ := range []Type{F32, BF16} {
			t.Run(fmt.Sprintf("%v/%v", typ, s), func(t *testing.T) {
				if typ == BF16 {
					bf16OK(t)
				}
				checkConv(t, s, typ, plainWeights)
			})
		}
	}
}

// TestConvPlainWeights runs the other weight layout choice too.
func TestConvPlainWeights(t *testing.T) {
	for _, s := range convShapes[:6] {
		for _, typ := range []Type{F32, BF16} {
			t.Run(fmt.Sprintf("%v/%v", typ, s), func(t *testing.T) {
				if typ == BF16 {
					bf16OK(t)
				}
				checkConv(t, s, typ, !plainWeights)
			})
		}
	}
}

func checkConv(t *testing.T, s ConvShape, typ Type, plain bool) {
	rng := rand.New(rand.NewPCG(uint64(s.N*s.H*s.C), uint64(s.O*s.K+s.S)))
	x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
	c, err := newConv(s, typ, plain, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkConvCalls(t, s, typ, c, x, w, dy)
}

func checkConvCalls(t *testing.T, s ConvShape, typ Type, c *Conv, x, w, dy []float32) {
	rng := rand.New(rand.NewPCG(uint64(s.N), uint64(s.O)))
	// Outputs start as garbage: every call must overwrite them.
	y, dx, dw := rnd(rng, s.YLen()), rnd(rng, s.XLen()), rnd(rng, s.WLen())
	c.Forward(x, w, y)
	c.BackwardData(dy, w, dx)
	c.BackwardWeights(x, dy, dw)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("impl fwd %s, bwd data %s, bwd weights %s", c.Impl(), c.impl(1), c.impl(2))
	ry, rdx, rdw := refConv(s, x, w, dy)
	ey, edx, edw := relErr(y, ry), relErr(dx, rdx), relErr(dw, rdw)
	if typ == F32 {
		if ey > 1e-5 || edx > 1e-5 || edw > 1e-5 {
			t.Errorf("relative error y %.3g dx %.3g dw %.3g, want <= 1e-5", ey, edx, edw)
		}
		return
	}
	// bf16: against the reference on rounded operands, only the float32
	// accumulation differs: its error grows like sqrt(terms) * 2^-24, far
	// below 1e-4 for the largest sums here (N*Ho*Wo = 1568 terms for dw).
	qy, qdx, qdw := refConv(s, rounded(x), rounded(w), rounded(dy))
	if ey, edx, edw := relErr(y, qy), relErr(dx, qdx), relErr(dw, qdw); ey > 1e-4 || edx > 1e-4 || edw > 1e-4 {
		t.Errorf("relative error to the rounded operands' reference y %.3g dx %.3g dw %.3g, want <= 1e-4", ey, edx, edw)
	}
	// Against the exact reference: each operand carries a relative
	// rounding error of at most 2^-9 (bf16 has 8 significant bits), so a
	// product at most ~2^-8 and a sum of terms t_i at most
	// 2^-8 * sum|t_i|. For random signs sum|t_i| / |sum t_i| grows like
	// sqrt(terms), hence the bound 2^-8 * sqrt(terms) (loose: the rounding
	// errors are themselves random and mostly cancel; measured errors are
	// ~2^-9). It must also be well above float32 noise, or the operands
	// were not rounded at all.
	t.Logf("relative error to the exact reference: y %.3g dx %.3g dw %.3g", ey, edx, edw)
	for _, e := range []struct {
		name  string
		err   float64
		terms int
	}{{"y", ey, s.K * s.K * s.C}, {"dx", edx, s.K * s.K * s.O}, {"dw", edw, s.N * s.Ho() * s.Wo()}} {
		bound := math.Ldexp(1, -8) * math.Sqrt(float64(e.terms))
		if e.err > bound || e.err < 1e-4 {
			t.Errorf("%s: relative error to the exact reference %.3g, want in [1e-4, %.3g]", e.name, e.err, bound)
		}
	}
}

// winogradShapes: the resnets' 3x3 stride-1 shapes (16 channels, where
// nChw16c is NHWC and no reorder runs; 32 and 64, where it is reordered
// each way), the CNN's conv2 (32 -> 64), a ragged 13x13 image, and a
// sample count that is not a tile multiple.
var winogradShapes = []ConvShape{
	{N: 4, H: 28, W: 28, C: 16, O: 16, K: 3, S: 1, P: 1},
	{N: 3, H: 14, W: 14, C: 32, O: 32, K: 3, S: 1, P: 1},
	{N: 5, H: 7, W: 7, C: 64, O: 64, K: 3, S: 1, P: 1},
	{N: 2, H: 14, W: 14, C: 32, O: 64, K: 3, S: 1, P: 1},
	{N: 2, H: 13, W: 13, C: 16, O: 48, K: 3, S: 1, P: 1},
}

// TestConvWinograd: Winograd primitives against the float64 reference,
// where oneDNN has them (AVX-512 CPUs); elsewhere NewConvWinograd must
// fail rather than compute something else. Shapes it cannot do must
// fail too.
func TestConvWinograd(t *testing.T) {
	for _, s := range winogradShapes {
		t.Run(s.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(s.N*s.H*s.C), uint64(s.O)))
			x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
			c, err := NewConvWinograd(s)
			if err != nil {
				if strings.Contains(ISA(), "avx512") {
					t.Fatalf("%s CPU: %v", ISA(), err)
				}
				t.Skipf("no Winograd convolution in oneDNN on this CPU (%s): %v", ISA(), err)
			}
			defer c.Close()
			if impl := c.Impl(); !strings.Contains(impl, "wino") {
				t.Fatalf("impl %q, want a Winograd one", impl)
			}
			checkConvCalls(t, s, F32, c, x, w, dy)
		})
	}
	// Shapes outside its conditions: refused, or (oneDNN takes 3
	// channels) right all the same.
	for _, s := range []ConvShape{convShapes[1], {N: 2, H: 9, W: 9, C: 16, O: 16, K: 3, S: 2, P: 1}, convShapes[3]} {
		c, err := NewConvWinograd(s)
		if err != nil {
			t.Logf("%v: %v", s, err)
			continue
		}
		t.Logf("%v: accepted (impl %s)", s, c.Impl())
		rng := rand.New(rand.NewPCG(uint64(s.N*s.H*s.C), uint64(s.O)))
		checkConvCalls(t, s, F32, c, rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen()))
		c.Close()
	}
}

func TestConvBadShape(t *testing.T) {
	for _, s := range []ConvShape{{}, {N: 1, H: 2, W: 2, C: 1, O: 1, K: 3, S: 1}, {N: 1, H: 4, W: 4, C: 1, O: 1, K: 3}} {
		if c, err := NewConv(s, F32); err == nil {
			c.Close()
			t.Errorf("%v accepted", s)
		} else {
			t.Log(err)
		}
	}
	c, err := NewConv(convShapes[1], F32)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer func() {
		if recover() == nil {
			t.Error("short slice accepted")
		}
	}()
	s := convShapes[1]
	c.Forward(make([]float32, s.XLen()-1), make([]float32, s.WLen()), make([]float32, s.YLen()))
}

func TestCloseIdempotent(t *testing.T) {
	c, err := NewConv(convShapes[0], F32)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	g, err := NewGemm(false, false, 3, 4, 5, 5, 4, 4, false, F32)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	g.Close()
}

func TestRoundBF16(t *testing.T) {
	cases := map[float32]float32{
		1:                                 1,
		math.Float32frombits(0x3f808000):  1,                                // tie, even below
		math.Float32frombits(0x3f818000):  math.Float32frombits(0x3f820000), // tie, even above
		math.Float32frombits(0x3f808001):  math.Float32frombits(0x3f810000),
		math.Float32frombits(0x7f7fffff):  float32(math.Inf(1)), // max float rounds up
		float32(math.Inf(-1)):             float32(math.Inf(-1)),
		math.Float32frombits(0x00400000):  0, // denormal flushed
		math.Float32frombits(0x80000001):  float32(math.Copysign(0, -1)),
		math.Float32frombits(0x00800000):  math.Float32frombits(0x00800000), // smallest normal
		-math.Float32frombits(0x3f80ffff): -math.Float32frombits(0x3f810000),
	}
	for in, want := range cases {
		got := make([]float32, 1)
		RoundBF16(got, []float32{in})
		if math.Float32bits(got[0]) != math.Float32bits(want) {
			t.Errorf("RoundBF16(%#x) = %#x, want %#x", math.Float32bits(in), math.Float32bits(got[0]), math.Float32bits(want))
		}
	}
	nan := make([]float32, 1)
	RoundBF16(nan, []float32{float32(math.NaN())})
	if !math.IsNaN(float64(nan[0])) {
		t.Errorf("NaN rounds to %v", nan[0])
	}
}

// TestToBF16MatchesRound checks the C conversions (the AVX512-BF16 one
// where the CPU has it, and the portable one) bit for bit against
// RoundBF16, on random values, ties, denormals, infinities and NaNs, at
// lengths that exercise the vector loop's tails.
func TestToBF16MatchesRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 1000)
	for i := range src {
		switch i % 5 {
		case 0:
			src[i] = math.Float32frombits(rng.Uint32())
		case 1:
			src[i] = math.Float32frombits(rng.Uint32()&^0xffff | 0x8000) // ties
		case 2:
			src[i] = math.Float32frombits(rng.Uint32() & 0x807fffff) // denormals
		case 3:
			src[i] = float32(rng.NormFloat64())
		default:
			src[i] = math.Float32frombits(rng.Uint32() | 0x7f800000) // inf and NaN
		}
	}
	t.Logf("vector conversion: %v", vectorBF16())
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 63, 100, 1000} {
		for _, vector := range []bool{true, false} {
			dst := make([]uint16, n+1)
			dst[n] = 0xbeef
			toBF16(dst, src[:n], vector)
			if dst[n] != 0xbeef {
				t.Fatalf("n %d vector %v: wrote past the end", n, vector)
			}
			for i := 0; i < n; i++ {
				want := bf16Bits(src[i])
				if dst[i] != want {
					t.Fatalf("n %d vector %v: %#x -> %#x, RoundBF16 %#x", n, vector, math.Float32bits(src[i]), dst[i], want)
				}
			}
		}
	}
}

func TestHasBF16MatchesCPUInfo(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip(err)
	}
	var flags map[string]bool
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = map[string]bool{}
			for _, f := range strings.Fields(v) {
				flags[f] = true
			}
			break
		}
	}
	if flags == nil {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	ok, missing := HasBF16()
	isa := ISA()
	t.Logf("HasBF16 %v %q, ISA %q", ok, missing, isa)
	// The kernel lists amx_bf16 only when it supports AMX, i.e. has
	// enabled the tile state.
	want := flags["avx512_bf16"] || flags["amx_bf16"]
	if want && !ok && os.Getenv("DNNL_MAX_CPU_ISA") != "" {
		want = false // oneDNN told not to use them
	}
	if ok != want {
		t.Errorf("HasBF16 = %v, /proc/cpuinfo avx512_bf16 %v amx_bf16 %v", ok, flags["avx512_bf16"], flags["amx_bf16"])
	}
	if ok != (missing == "") {
		t.Errorf("HasBF16 = %v with missing %q", ok, missing)
	}
	if flags["avx512_bf16"] != strings.Contains(isa, "avx512_bf16") || flags["amx_bf16"] != strings.Contains(isa, "amx_bf16") {
		t.Errorf("ISA %q, /proc/cpuinfo avx512_bf16 %v amx_bf16 %v", isa, flags["avx512_bf16"], flags["amx_bf16"])
	}
	if flags["avx512_bf16"] && !vectorBF16() {
		t.Error("the CPU has AVX512-BF16 but the conversion does not use it")
	}
}

// refGemm computes op(a) op(b) (+ c) in float64.
func refGemm(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, acc bool) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			if acc {
				s = float64(c[i*ldc+j])
			}
			for p := 0; p < k; p++ {
				var av, bv float32
				if tA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if tB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = s
		}
	}
	return out
}

// gemmCase is one Gemm test: random operands with leading dimensions pad
// wider than needed.
type gemmCase struct {
	tA, tB  bool
	m, n, k int
	pad     int
	acc     bool
}

func (g gemmCase) dims() (lda, ldb, ldc, la, lb, lc int) {
	ar, ac := g.m, g.k
	if g.tA {
		ar, ac = g.k, g.m
	}
	br, bc := g.k, g.n
	if g.tB {
		br, bc = g.n, g.k
	}
	lda, ldb, ldc = ac+g.pad, bc+g.pad, g.n+g.pad
	return lda, ldb, ldc, lda * ar, ldb * br, ldc * g.m
}

func gemmCases() []gemmCase {
	var cs []gemmCase
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			for _, acc := range []bool{false, true} {
				for i, d := range [][3]int{{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 33, 129}, {300, 10, 17}, {5, 64, 288}} {
					cs = append(cs, gemmCase{tA, tB, d[0], d[1], d[2], i % 3 * 3, acc})
				}
			}
		}
	}
	return cs
}

// gemmResult compares out (leading dimension ldc) with want and checks
// that the padding columns of out kept their values from before.
func gemmResult(t *testing.T, name string, out, before []float32, ldc, m, n int, want []float64, tol float64) {
	t.Helper()
	got := make([]float32, m*n)
	for i := 0; i < m; i++ {
		copy(got[i*n:], out[i*ldc:i*ldc+n])
		for j := n; j < ldc && i*ldc+j < len(out); j++ {
			if out[i*ldc+j] != before[i*ldc+j] {
				t.Fatalf("%s: wrote c[%d][%d], outside the matrix", name, i, j)
			}
		}
	}
	if e := relErr(got, want); e > tol {
		t.Errorf("%s: relative error %.3g, want <= %g", name, e, tol)
	}
}

func TestGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range []Type{F32, BF16} {
		if typ == BF16 {
			if ok, _ := HasBF16(); !ok {
				continue
			}
		}
		for _, g := range gemmCases() {
			name := fmt.Sprintf("%v %+v", typ, g)
			lda, ldb, ldc, la, lb, lc := g.dims()
			a, b, c := rnd(rng, la), rnd(rng, lb), rnd(rng, lc)
			before := append([]float32(nil), c...)
			gm, err := NewGemm(g.tA, g.tB, g.m, g.n, g.k, lda, ldb, ldc, g.acc, typ)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			gm.Run(a, b, c)
			if err := gm.Err(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			ra, rb := a, b
			if typ == BF16 {
				ra, rb = rounded(a), rounded(b)
			}
			want := refGemm(g.tA, g.tB, g.m, g.n, g.k, ra, lda, rb, ldb, before, ldc, g.acc)
			tol := 1e-5
			if typ == BF16 {
				tol = 1e-4
			}
			gemmResult(t, name, c, before, ldc, g.m, g.n, want, tol)
			if g.m == 64 && !g.acc {
				t.Logf("%s: %s", name, gm.Impl())
			}
			gm.Close()
		}
	}
}

func TestGemmsAndDegenerate(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	gs := NewGemms(F32)
	defer gs.Close()
	for round := 0; round < 2; round++ {
		for _, g := range gemmCases()[:12] {
			lda, ldb, ldc, la, lb, lc := g.dims()
			a, b, c := rnd(rng, la), rnd(rng, lb), rnd(rng, lc)
			before := append([]float32(nil), c...)
			if err := gs.Run(g.tA, g.tB, g.m, g.n, g.k, a, lda, b, ldb, g.acc, c, ldc); err != nil {
				t.Fatal(err)
			}
			gemmResult(t, fmt.Sprintf("Gemms %+v", g), c, before, ldc, g.m, g.n,
				refGemm(g.tA, g.tB, g.m, g.n, g.k, a, lda, b, ldb, before, ldc, g.acc), 1e-5)
		}
	}
	if len(gs.m) != 12 {
		t.Errorf("%d cached Gemms, want 12", len(gs.m))
	}
	// k = 0: C is cleared, or kept when accumulating.
	c := []float32{1, 2, 3, 4}
	if err := gs.Run(false, false, 2, 2, 0, nil, 1, nil, 2, true, c, 2); err != nil || c[3] != 4 {
		t.Errorf("k=0 accumulate: %v, c %v", err, c)
	}
	if err := gs.Run(false, false, 2, 2, 0, nil, 1, nil, 2, false, c, 2); err != nil || c[3] != 0 {
		t.Errorf("k=0: %v, c %v", err, c)
	}
	if err := gs.Run(false, false, 2, 2, 2, nil, 1, nil, 2, false, c, 2); err == nil {
		t.Error("lda < k accepted")
	} else {
		t.Log(err)
	}
}

func TestSgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, g := range gemmCases() {
		if g.acc {
			continue
		}
		lda, ldb, ldc, la, lb, lc := g.dims()
		a, b, c := rnd(rng, la), rnd(rng, lb), rnd(rng, lc)
		before := append([]float32(nil), c...)
		if err := Sgemm(g.tA, g.tB, g.m, g.n, g.k, 0.5, a, lda, b, ldb, 2, c, ldc); err != nil {
			t.Fatal(err)
		}
		want := refGemm(g.tA, g.tB, g.m, g.n, g.k, a, lda, b, ldb, before, ldc, true)
		// want = ab + c; Sgemm gave 0.5 ab + 2 c = 0.5 (want + 3 c).
		for i := 0; i < g.m; i++ {
			for j := 0; j < g.n; j++ {
				want[i*g.n+j] = 0.5 * (want[i*g.n+j] + 3*float64(before[i*ldc+j]))
			}
		}
		gemmResult(t, fmt.Sprintf("Sgemm %+v", g), c, before, ldc, g.m, g.n, want, 1e-5)
	}
}

func TestNoAllocs(t *testing.T) {
	s := convShapes[5]
	rng := rand.New(rand.NewPCG(1, 2))
	x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
	y, dx, dw := make([]float32, s.YLen()), make([]float32, s.XLen()), make([]float32, s.WLen())
	types := []Type{F32}
	if ok, _ := HasBF16(); ok {
		types = append(types, BF16)
	}
	for _, typ := range types {
		c, err := NewConv(s, typ)
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(5, func() {
			c.Forward(x, w, y)
			c.BackwardData(dy, w, dx)
			c.BackwardWeights(x, dy, dw)
		}); n != 0 {
			t.Errorf("Conv %v: %v allocations per call", typ, n)
		}
		c.Close()
		gs := NewGemms(typ)
		a, b, cc := rnd(rng, 64*288), rnd(rng, 288*32), make([]float32, 64*32)
		gs.Run(false, false, 64, 32, 288, a, 288, b, 32, true, cc, 32)
		if n := testing.AllocsPerRun(5, func() {
			gs.Run(false, false, 64, 32, 288, a, 288, b, 32, true, cc, 32)
		}); n != 0 {
			t.Errorf("Gemms %v: %v allocations per call", typ, n)
		}
		gs.Close()
	}
}

// TestOneThreadAndConcurrent runs two Convs and two Gemms from two locked
// goroutines at once: the results must equal a serial run bit for bit,
// and no OS thread may appear (oneDNN's OpenMP runtime would start a team
// for a parallel region with more than one thread, one pool per calling
// thread).
func TestOneThreadAndConcurrent(t *testing.T) {
	shapes := []ConvShape{convShapes[5], convShapes[2]}
	type work struct {
		s        ConvShape
		x, w, dy []float32
		a, b     []float32
		conv     *Conv
		gemm     *Gemm
		typ      Type
	}
	types := []Type{F32, F32}
	if ok, _ := HasBF16(); ok {
		types[1] = BF16
	}
	rng := rand.New(rand.NewPCG(11, 12))
	ws := make([]*work, 2)
	for i := range ws {
		s := shapes[i]
		wk := &work{s: s, typ: types[i], x: rnd(rng, s.XLen()), w: rnd(rng, s.WLen()), dy: rnd(rng, s.YLen()),
			a: rnd(rng, 200*96), b: rnd(rng, 96*40)}
		var err error
		if wk.conv, err = NewConv(s, types[i]); err != nil {
			t.Fatal(err)
		}
		defer wk.conv.Close()
		if wk.gemm, err = NewGemm(i == 1, false, 200, 40, 96, map[bool]int{false: 96, true: 200}[i == 1], 40, 40, false, types[i]); err != nil {
			t.Fatal(err)
		}
		defer wk.gemm.Close()
		ws[i] = wk
	}
	run := func(wk *work) (y, dx, dw, c []float32) {
		y, dx, dw, c = make([]float32, wk.s.YLen()), make([]float32, wk.s.XLen()), make([]float32, wk.s.WLen()), make([]float32, 200*40)
		for r := 0; r < 3; r++ {
			wk.conv.Forward(wk.x, wk.w, y)
			wk.conv.BackwardData(wk.dy, wk.w, dx)
			wk.conv.BackwardWeights(wk.x, wk.dy, dw)
			wk.gemm.Run(wk.a, wk.b, c)
		}
		return
	}
	var serial [2][4][]float32
	for i, wk := range ws {
		y, dx, dw, c := run(wk)
		serial[i] = [4][]float32{y, dx, dw, c}
		// Determinism: a second run gives the same bits.
		y2, dx2, dw2, c2 := run(wk)
		for j, pair := range [][2][]float32{{y, y2}, {dx, dx2}, {dw, dw2}, {c, c2}} {
			if !same(pair[0], pair[1]) {
				t.Errorf("%v %v: output %d differs between two identical runs", wk.typ, wk.s, j)
			}
		}
	}
	// The Go runtime may start threads of its own meanwhile (a locked
	// goroutine holds one, a long cgo call makes the scheduler hand its P
	// to another): the threadcreate profile counts those, and only threads
	// beyond them are someone else's.
	var wg sync.WaitGroup
	before := threads(t)
	var conc [2][4][]float32
	var omp [2]int
	for i, wk := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			y, dx, dw, c := run(wk)
			conc[i] = [4][]float32{y, dx, dw, c}
			omp[i] = ompMaxThreads()
		}()
	}
	wg.Wait()
	after := threads(t)
	t.Logf("OS threads less the Go runtime's count (threadcreate): %d before, %d after; OpenMP max threads on the workers %v", before, after, omp)
	if after > before {
		t.Errorf("%d OS threads not started by Go appeared while two workers ran oneDNN primitives", after-before)
	}
	for i := range ws {
		if omp[i] != 1 {
			t.Errorf("worker %d: OpenMP max threads %d after the calls, want 1", i, omp[i])
		}
		for j := range 4 {
			if !same(serial[i][j], conc[i][j]) {
				t.Errorf("%v %v: output %d differs between concurrent and serial runs", ws[i].typ, ws[i].s, j)
			}
		}
	}
}

func same(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// threads is the number of the process's OS threads less those the Go
// runtime started.
func threads(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	return len(ents) - pprof.Lookup("threadcreate").Count()
}

// conv2 is the CNN's second convolution.
var conv2 = ConvShape{N: 32, H: 14, W: 14, C: 32, O: 64, K: 3, S: 1, P: 1}

func BenchmarkConv(b *testing.B) {
	for _, typ := range []Type{F32, BF16} {
		// The plain (O,K,K,C) weight layout is left out: oneDNN has only
		// its reference implementation for it (ref:any, 0.1 GFLOP/s).
		for _, plain := range []bool{false} {
			layout := "blocked"
			if plain {
				layout = "plain"
			}
			s := conv2
			rng := rand.New(rand.NewPCG(1, 1))
			x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
			y, dx, dw := make([]float32, s.YLen()), make([]float32, s.XLen()), make([]float32, s.WLen())
			for _, op := range []string{"fwd", "bwdData", "bwdWeights"} {
				b.Run(fmt.Sprintf("%v/%s/%s", typ, layout, op), func(b *testing.B) {
					if typ == BF16 {
						bf16OK(b)
					}
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c, err := newConv(s, typ, plain, false)
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					benchConvPass(b, c, op, 0, x, w, dy, y, dx, dw)
					b.ReportMetric(0, "ns/op")
					b.Logf("%s", c.impl(map[string]int{"fwd": 0, "bwdData": 1, "bwdWeights": 2}[op]))
				})
			}
		}
	}
}

// resnet8Convs are resnet8's oneDNN convolutions on bf16 kernels at
// batch 64, each for the chunk of samples the model gives it (at most
// 640 KB of input and output: 4, 8 and 16): the first stage's 16 -> 16 (28x28, where
// the bf16 Winograd does not pay) and the two stride-2 entries of the
// later stages.
var resnet8Convs = []struct {
	name string
	s    ConvShape
}{
	{"res1-16x16", ConvShape{N: 4, H: 28, W: 28, C: 16, O: 16, K: 3, S: 1, P: 1}},
	{"res2.conv1-16x32s2", ConvShape{N: 8, H: 28, W: 28, C: 16, O: 32, K: 3, S: 2, P: 1}},
	{"res3.conv1-32x64s2", ConvShape{N: 16, H: 14, W: 14, C: 32, O: 64, K: 3, S: 2, P: 1}},
}

// BenchmarkConvResnet8 runs resnet8's oneDNN convolution shapes in both
// arithmetics, bf16 on operands converted beforehand as the model passes
// them, GFLOP/s counting multiply-adds twice: against `hpctrain bench
// peak`, how close oneDNN comes to the core's peak.
func BenchmarkConvResnet8(b *testing.B) {
	for _, sh := range resnet8Convs {
		for _, typ := range []Type{F32, BF16} {
			s := sh.s
			rng := rand.New(rand.NewPCG(1, 1))
			x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
			y, dx, dw := make([]float32, s.YLen()), make([]float32, s.XLen()), make([]float32, s.WLen())
			for _, op := range []string{"fwd", "bwdData", "bwdWeights"} {
				b.Run(fmt.Sprintf("%s/%v/%s", sh.name, typ, op), func(b *testing.B) {
					if typ == BF16 {
						bf16OK(b)
					}
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c, err := NewConv(s, typ)
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					if typ == F32 {
						benchConvPass(b, c, op, 0, x, w, dy, y, dx, dw)
					} else {
						benchConv16Pass(b, c, op, x, w, dy, y, dx, dw)
					}
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}

// benchConv16Pass is benchConvPass for a BF16 Conv given x and dy in
// bf16 (converted once, outside the timing).
func benchConv16Pass(b *testing.B, c *Conv, op string, x, w, dy, y, dx, dw []float32) {
	x16, dy16 := make([]uint16, len(x)), make([]uint16, len(dy))
	ToBF16(x16, x)
	ToBF16(dy16, dy)
	benchConvCall(b, c, map[string]func(){
		"fwd":        func() { c.ForwardGen16(x16, w, y, 1) },
		"bwdData":    func() { c.BackwardDataGen16(dy16, w, dx, 1) },
		"bwdWeights": func() { c.BackwardWeights16(x16, dy16, dw) },
	}[op])
}

// BenchmarkGemm runs the conv2 shape as im2col matmuls: 6272x64x288 (the
// forward product), its weight gradient (288x64, k 6272, A transposed)
// and its input gradient (6272x288, k 64, B transposed).
func BenchmarkGemm(b *testing.B) {
	for _, typ := range []Type{F32, BF16} {
		for _, d := range []struct {
			tA, tB  bool
			m, n, k int
		}{{false, false, 6272, 64, 288}, {true, false, 288, 64, 6272}, {false, true, 6272, 288, 64}} {
			b.Run(fmt.Sprintf("%v/%dx%dx%d/tA=%v,tB=%v", typ, d.m, d.n, d.k, d.tA, d.tB), func(b *testing.B) {
				if typ == BF16 {
					bf16OK(b)
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				g := gemmCase{d.tA, d.tB, d.m, d.n, d.k, 0, false}
				lda, ldb, ldc, la, lb, lc := g.dims()
				rng := rand.New(rand.NewPCG(1, 1))
				a, bb, c := rnd(rng, la), rnd(rng, lb), make([]float32, lc)
				gm, err := NewGemm(d.tA, d.tB, d.m, d.n, d.k, lda, ldb, ldc, false, typ)
				if err != nil {
					b.Fatal(err)
				}
				defer gm.Close()
				gm.Run(a, bb, c)
				b.ResetTimer()
				for range b.N {
					gm.Run(a, bb, c)
				}
				b.ReportMetric(2*float64(d.m*d.n*d.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(0, "ns/op")
				b.Logf("%s", gm.Impl())
			})
		}
	}
	b.Run("sgemm/6272x64x288", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		rng := rand.New(rand.NewPCG(1, 1))
		a, bb, c := rnd(rng, 6272*288), rnd(rng, 288*64), make([]float32, 6272*64)
		for range b.N {
			if err := Sgemm(false, false, 6272, 64, 288, 1, a, 288, bb, 64, 0, c, 64); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2*6272*64*288*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		b.ReportMetric(0, "ns/op")
	})
}

// BenchmarkToBF16 is the conversion of conv2's x (200704 floats).
func BenchmarkToBF16(b *testing.B) {
	src := rnd(rand.New(rand.NewPCG(1, 1)), conv2.XLen())
	dst := make([]uint16, len(src))
	for _, vector := range []bool{true, false} {
		b.Run(fmt.Sprintf("vector=%v", vector), func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for range b.N {
				toBF16(dst, src, vector)
			}
		})
	}
}

// TestGemmsRunBF16: products of operands converted once (ToBF16) with
// their float32 leading dimensions are those of Run converting them, to
// the bf16 tolerance against the float64 product of the rounded operands.
func TestGemmsRunBF16(t *testing.T) {
	bf16OK(t)
	rng := rand.New(rand.NewPCG(11, 12))
	gs := NewGemms(BF16)
	defer gs.Close()
	for _, g := range gemmCases() {
		name := fmt.Sprintf("RunBF16 %+v", g)
		lda, ldb, ldc, la, lb, lc := g.dims()
		a, b, c := rnd(rng, la), rnd(rng, lb), rnd(rng, lc)
		before := append([]float32(nil), c...)
		a16, b16 := make([]uint16, la), make([]uint16, lb)
		ToBF16(a16, a)
		ToBF16(b16, b)
		if err := gs.RunBF16(g.tA, g.tB, g.m, g.n, g.k, a16, lda, b16, ldb, g.acc, c, ldc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := refGemm(g.tA, g.tB, g.m, g.n, g.k, rounded(a), lda, rounded(b), ldb, before, ldc, g.acc)
		gemmResult(t, name, c, before, ldc, g.m, g.n, want, 1e-4)
	}
	if err := NewGemms(F32).RunBF16(false, false, 1, 1, 1, []uint16{0}, 1, []uint16{0}, 1, false, []float32{0}, 1); err == nil {
		t.Error("RunBF16 on an F32 cache accepted")
	}
}

// BenchmarkConvWinograd: direct against Winograd on the shapes the model
// calls them with (the resnets' chunks of 4, 8 and 16 samples per stage,
// and the CNN's conv2), the weights reordered once as in a network's pass
// (ForwardGen); GFLOP/s counts a direct convolution's multiply-adds on
// both sides, so the ratio is the speed-up.
func BenchmarkConvWinograd(b *testing.B) {
	shapes := []ConvShape{
		{N: 4, H: 28, W: 28, C: 16, O: 16, K: 3, S: 1, P: 1},
		{N: 8, H: 14, W: 14, C: 32, O: 32, K: 3, S: 1, P: 1},
		{N: 16, H: 7, W: 7, C: 64, O: 64, K: 3, S: 1, P: 1},
		conv2,
	}
	for _, s := range shapes {
		rng := rand.New(rand.NewPCG(1, 1))
		x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
		y, dx, dw := make([]float32, s.YLen()), make([]float32, s.XLen()), make([]float32, s.WLen())
		for _, op := range []string{"fwd", "bwdData", "bwdWeights"} {
			for _, wino := range []bool{false, true} {
				alg := map[bool]string{false: "direct", true: "winograd"}[wino]
				b.Run(fmt.Sprintf("%dx%dx%dx%d/%s/%s", s.N, s.H, s.W, s.C, op, alg), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c, err := newConv(s, F32, false, wino)
					if err != nil {
						b.Skip(err)
					}
					defer c.Close()
					benchConvPass(b, c, op, 1, x, w, dy, y, dx, dw)
				})
			}
		}
	}
}

// TestConvWeightsGen: a call with the generation of the last reorder
// reuses the reordered weights (so it still computes with the old ones,
// should the caller break its promise), a new generation or 0 reorders;
// forward and backward data keep their own.
func TestConvWeightsGen(t *testing.T) {
	s := convShapes[4]
	rng := rand.New(rand.NewPCG(5, 6))
	x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
	w2 := rnd(rng, s.WLen())
	want := func(w []float32) ([]float64, []float64) {
		ry, rdx, _ := refConv(s, x, w, dy)
		return ry, rdx
	}
	y1, dx1 := want(w)
	y2, dx2 := want(w2)
	makers := map[string]func() (*Conv, error){"direct": func() (*Conv, error) { return NewConv(s, F32) }}
	if c, err := NewConvWinograd(s); err == nil {
		c.Close()
		makers["winograd"] = func() (*Conv, error) { return NewConvWinograd(s) }
	}
	for name, mk := range makers {
		c, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		y, dx := make([]float32, s.YLen()), make([]float32, s.XLen())
		for _, step := range []struct {
			w       []float32
			gen     uint64
			wy, wdx []float64
		}{{w, 7, y1, dx1}, {w2, 7, y1, dx1}, {w2, 8, y2, dx2}, {w, 8, y2, dx2}, {w, 0, y1, dx1}} {
			c.ForwardGen(x, step.w, y, step.gen)
			c.BackwardDataGen(dy, step.w, dx, step.gen)
			if e := relErr(y, step.wy); e > 1e-5 {
				t.Errorf("%s gen %d: forward relative error %.3g against the weights it should use", name, step.gen, e)
			}
			if e := relErr(dx, step.wdx); e > 1e-5 {
				t.Errorf("%s gen %d: backward data relative error %.3g", name, step.gen, e)
			}
		}
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

// benchConvPass times one pass of c (op: fwd, bwdData or bwdWeights) and
// reports GFLOP/s; gen is ForwardGen's (0: reorder the weights each call).
func benchConvPass(b *testing.B, c *Conv, op string, gen uint64, x, w, dy, y, dx, dw []float32) {
	benchConvCall(b, c, map[string]func(){
		"fwd":        func() { c.ForwardGen(x, w, y, gen) },
		"bwdData":    func() { c.BackwardDataGen(dy, w, dx, gen) },
		"bwdWeights": func() { c.BackwardWeights(x, dy, dw) },
	}[op])
}

// benchConvCall times f, one pass of c, after one untimed call.
func benchConvCall(b *testing.B, c *Conv, f func()) {
	f()
	b.ResetTimer()
	for range b.N {
		f()
	}
	b.ReportMetric(c.s.Flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// TestConvBF16Operands: the calls taking operands already in bf16 give the
// bits of those converting float32 operands themselves, and they refuse a
// float32 convolution.
func TestConvBF16Operands(t *testing.T) {
	bf16OK(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, s := range convShapes {
		c, err := NewConv(s, BF16)
		if err != nil {
			t.Fatal(err)
		}
		x, w, dy := rnd(rng, s.XLen()), rnd(rng, s.WLen()), rnd(rng, s.YLen())
		x16, dy16 := make([]uint16, len(x)), make([]uint16, len(dy))
		ToBF16(x16, x)
		ToBF16(dy16, dy)
		y, dx, dw := make([]float32, s.YLen()), make([]float32, s.XLen()), make([]float32, s.WLen())
		y2, dx2, dw2 := make([]float32, s.YLen()), make([]float32, s.XLen()), make([]float32, s.WLen())
		c.ForwardGen(x, w, y, 3)
		c.BackwardDataGen(dy, w, dx, 3)
		c.BackwardWeights(x, dy, dw)
		c.ForwardGen16(x16, w, y2, 3)
		c.BackwardDataGen16(dy16, w, dx2, 3)
		c.BackwardWeights16(x16, dy16, dw2)
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		for _, r := range []struct {
			name string
			a, b []float32
		}{{"forward", y, y2}, {"backward data", dx, dx2}, {"backward weights", dw, dw2}} {
			for i := range r.a {
				if math.Float32bits(r.a[i]) != math.Float32bits(r.b[i]) {
					t.Errorf("%v %s: [%d] %v from bf16 operands, %v converting them", s, r.name, i, r.b[i], r.a[i])
					break
				}
			}
		}
		c.Close()
	}
	c, err := NewConv(convShapes[0], F32)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer func() {
		if recover() == nil {
			t.Error("ForwardGen16 on a float32 convolution did not panic")
		}
	}()
	s := convShapes[0]
	c.ForwardGen16(make([]uint16, s.XLen()), make([]float32, s.WLen()), make([]float32, s.YLen()), 0)
}
