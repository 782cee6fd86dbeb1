package cuda

import (
	"math"
	"math/rand"
	"testing"
	"unsafe"
)

// gemmRef is C = alpha op(A) op(B) + beta C, column-major, in float64.
func gemmRef(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for j := range n {
		for i := range m {
			var sum float64
			for l := range k {
				ia, ib := i+l*lda, l+j*ldb
				if transA {
					ia = l + i*lda
				}
				if transB {
					ib = j + l*ldb
				}
				av, bv := a[ia], b[ib]
				sum += av * bv
			}
			c[i+j*ldc] = alpha*sum + beta*c[i+j*ldc]
		}
	}
}

type gemmCase struct {
	transA, transB bool
	m, n, k        int
}

var gemmCases = []gemmCase{
	{false, false, 5, 7, 3}, {true, false, 5, 7, 3}, {false, true, 5, 7, 3}, {true, true, 5, 7, 3},
	{false, false, 33, 17, 65}, {true, true, 1, 9, 40},
}

// operands returns A, B, C and their leading dimensions (each larger than
// the least, so that strides are exercised), values rounded by round.
func operands(r *rand.Rand, g gemmCase, round func(float32) float32) (a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac := g.m, g.k
	if g.transA {
		ar, ac = g.k, g.m
	}
	br, bc := g.k, g.n
	if g.transB {
		br, bc = g.n, g.k
	}
	lda, ldb, ldc = ar+2, br+1, g.m+3
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = round(float32(r.NormFloat64()))
		}
		return x
	}
	return fill(lda * ac), lda, fill(ldb * bc), ldb, fill(ldc * g.n), ldc
}

func f64s(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func upload[T any](t *testing.T, c *Context, x []T) Ptr {
	t.Helper()
	size := int(unsafe.Sizeof(x[0])) * len(x)
	p, err := c.Alloc(size)
	must(t, err)
	t.Cleanup(func() { c.Free(p) })
	must(t, CopyHtoD(p, unsafe.Pointer(&x[0]), size, nil))
	return p
}

func download(t *testing.T, p Ptr, n int) []float32 {
	t.Helper()
	y := make([]float32, n)
	must(t, CopyDtoH(unsafe.Pointer(&y[0]), p, 4*n, nil))
	must(t, (*Stream)(nil).Sync())
	return y
}

func newBLAS(t *testing.T, c *Context) *BLAS {
	t.Helper()
	b, err := c.NewBLAS()
	must(t, err)
	t.Cleanup(func() { b.Destroy() })
	return b
}

func checkGemm(t *testing.T, g gemmCase, got []float32, want []float64, n, ldc int) {
	t.Helper()
	for j := range n {
		for i := range ldc {
			v, w := float64(got[i+j*ldc]), want[i+j*ldc]
			if math.Abs(v-w) > 1e-4*(1+math.Abs(w)) {
				t.Fatalf("%+v: C[%d,%d] = %v, want %v", g, i, j, v, w)
			}
		}
	}
}

func TestSgemm(t *testing.T) {
	c := openDevice(t)
	b := newBLAS(t, c)
	s, err := c.NewStream()
	must(t, err)
	defer s.Destroy()
	must(t, b.SetStream(s))
	must(t, b.SetTF32(false))
	r := rand.New(rand.NewSource(2))
	same := func(x float32) float32 { return x }
	for _, g := range gemmCases {
		a, lda, bm, ldb, cm, ldc := operands(r, g, same)
		da, db, dc := upload(t, c, a), upload(t, c, bm), upload(t, c, cm)
		must(t, b.Sgemm(g.transA, g.transB, g.m, g.n, g.k, 0.75, da, lda, db, ldb, -0.5, dc, ldc))
		must(t, s.Sync())
		want := f64s(cm)
		gemmRef(g.transA, g.transB, g.m, g.n, g.k, 0.75, f64s(a), lda, f64s(bm), ldb, -0.5, want, ldc)
		// Rows m..ldc-1 of C are padding: cuBLAS leaves them, as the reference does.
		checkGemm(t, g, download(t, dc, len(cm)), want, g.n, ldc)
	}
	if err := b.Sgemm(false, false, -1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 1); err == nil {
		t.Error("Sgemm with m = -1 succeeded")
	} else if e, ok := err.(*Error); !ok || e.Name != "CUBLAS_STATUS_INVALID_VALUE" {
		t.Errorf("Sgemm with m = -1: %v", err)
	}
}

func bf16Bits(x float32) uint16 { return uint16(math.Float32bits(x) >> 16) } // x already a bf16 value

func bf16Round(x float32) float32 { return math.Float32frombits(uint32(bf16Ref(x)) << 16) }

// halfBits converts x, already an IEEE half value in the normal range, to
// its bits.
func halfBits(x float32) uint16 {
	u := math.Float32bits(x)
	if x == 0 {
		return uint16(u >> 16)
	}
	e := (u>>23)&0xff - 112
	return uint16(u>>16)&0x8000 | uint16(e)<<10 | uint16((u>>13)&0x3ff)
}

func halfValue(h uint16) float64 {
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	v := math.Ldexp(1+m/1024, e-15)
	if e == 0 {
		v = math.Ldexp(m/1024, -14)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// GemmEx with bf16 or half operands and a float32 C.
func TestGemmEx(t *testing.T) {
	c := openDevice(t)
	b := newBLAS(t, c)
	r := rand.New(rand.NewSource(3))
	for _, typ := range []struct {
		dt    DataType
		round func(float32) float32
		bits  func(float32) uint16
	}{
		{R16BF, bf16Round, bf16Bits},
		{R16F, func(x float32) float32 { return float32(halfValue(halfBits(truncHalf(x)))) }, halfBits},
	} {
		for _, g := range gemmCases {
			a, lda, bm, ldb, cm, ldc := operands(r, g, typ.round)
			a16, b16 := make([]uint16, len(a)), make([]uint16, len(bm))
			for i, v := range a {
				a16[i] = typ.bits(v)
			}
			for i, v := range bm {
				b16[i] = typ.bits(v)
			}
			da, db, dc := upload(t, c, a16), upload(t, c, b16), upload(t, c, cm)
			must(t, b.GemmEx(g.transA, g.transB, g.m, g.n, g.k, 1.5, da, typ.dt, lda, db, typ.dt, ldb, 0.25, dc, R32F, ldc))
			want := f64s(cm)
			gemmRef(g.transA, g.transB, g.m, g.n, g.k, 1.5, f64s(a), lda, f64s(bm), ldb, 0.25, want, ldc)
			checkGemm(t, g, download(t, dc, len(cm)), want, g.n, ldc)
		}
	}
	// All float32 is Sgemm.
	g := gemmCases[4]
	a, lda, bm, ldb, cm, ldc := operands(r, g, func(x float32) float32 { return x })
	da, db, dc := upload(t, c, a), upload(t, c, bm), upload(t, c, cm)
	must(t, b.GemmEx(g.transA, g.transB, g.m, g.n, g.k, 1, da, R32F, lda, db, R32F, ldb, 0, dc, R32F, ldc))
	want := f64s(cm)
	gemmRef(g.transA, g.transB, g.m, g.n, g.k, 1, f64s(a), lda, f64s(bm), ldb, 0, want, ldc)
	checkGemm(t, g, download(t, dc, len(cm)), want, g.n, ldc)
}

// truncHalf keeps 10 mantissa bits of a normal-range x (|x| in [2^-14,
// 65504]); the test's values are normal samples, in range or zero.
func truncHalf(x float32) float32 {
	if x == 0 || math.Abs(float64(x)) < 1.0/16384 {
		return 0
	}
	return math.Float32frombits(math.Float32bits(x) &^ 0x1fff)
}
