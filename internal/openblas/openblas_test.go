package openblas

import (
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestSgemmMatchesGonum compares the installed Sgemm with gonum's pure-Go
// one on every transpose combination and odd shapes (the conformance check
// of the native backend).
func TestSgemmMatchesGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	rnd := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = rng.Float32()*2 - 1
		}
		return s
	}
	impl := blas32.Implementation()
	if _, pure := impl.(gonum.Implementation); pure == Native {
		t.Fatalf("installed implementation %T, native %v", impl, Native)
	}
	var ref gonum.Implementation
	for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
		for _, tB := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			for _, d := range [][3]int{{1, 1, 1}, {7, 5, 3}, {64, 33, 129}, {300, 10, 17}} {
				m, n, k := d[0], d[1], d[2]
				lda, ldb := k, n
				if tA == blas.Trans {
					lda = m
				}
				if tB == blas.Trans {
					ldb = k
				}
				a, b := rnd(m*k), rnd(k*n)
				c0 := rnd(m * n)
				c1 := append([]float32(nil), c0...)
				impl.Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, 2, c0, n)
				ref.Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, 2, c1, n)
				for i := range c0 {
					if d := c0[i] - c1[i]; d > 1e-4 || d < -1e-4 {
						t.Fatalf("%v %v %v: c[%d] = %v, gonum %v", tA, tB, d, i, c0[i], c1[i])
					}
				}
			}
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("short slice accepted")
			}
		}()
		impl.Sgemm(blas.NoTrans, blas.NoTrans, 4, 4, 4, 1, make([]float32, 15), 4, make([]float32, 16), 4, 0, make([]float32, 16), 4)
	}()
}
