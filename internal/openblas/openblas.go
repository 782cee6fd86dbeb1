//go:build cgo && !purego

package openblas

/*
#cgo pkg-config: openblas
#include <cblas.h>

int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
*/
import "C"

import (
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
)

// Native reports whether OpenBLAS is linked in (false under purego).
const Native = true

func init() {
	SetThreads(1)
	blas32.Use(Implementation{})
}

// Implementation is gonum's pure-Go BLAS with Sgemm and Sgemv done by
// OpenBLAS.
type Implementation struct{ gonum.Implementation }

// SetThreads sets the number of threads OpenBLAS uses inside one call. The
// trainer sets it to the rank's threads; the workers' pinning confines them.
func SetThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// Threads is the number of threads OpenBLAS uses inside one call.
func Threads() int { return int(C.openblas_get_num_threads()) }

func trans(t blas.Transpose) C.enum_CBLAS_TRANSPOSE {
	if t == blas.NoTrans {
		return C.CblasNoTrans
	}
	return C.CblasTrans
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C (row major). Argument
// checks are gonum's: it panics with gonum's messages on misuse.
func (Implementation) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkGemm(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	C.cblas_sgemm(C.CblasRowMajor, trans(tA), trans(tB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.blasint(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.blasint(ldc))
}

// Sgemv computes y = alpha*op(A)*x + beta*y (row major).
func (Implementation) Sgemv(tA blas.Transpose, m, n int, alpha float32, a []float32, lda int, x []float32, incX int, beta float32, y []float32, incY int) {
	if m == 0 || n == 0 {
		return
	}
	lx, ly := n, m
	if tA != blas.NoTrans {
		lx, ly = m, n
	}
	if incX <= 0 || incY <= 0 || lda < max(1, n) || len(a) < lda*(m-1)+n ||
		len(x) < 1+(lx-1)*incX || len(y) < 1+(ly-1)*incY {
		panic("openblas: bad sgemv arguments")
	}
	C.cblas_sgemv(C.CblasRowMajor, trans(tA), C.blasint(m), C.blasint(n), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda), (*C.float)(unsafe.Pointer(&x[0])), C.blasint(incX),
		C.float(beta), (*C.float)(unsafe.Pointer(&y[0])), C.blasint(incY))
}

// checkGemm panics if the slices are too short for the dimensions: a
// C library must never read or write outside Go's slices.
func checkGemm(tA, tB blas.Transpose, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac := m, k
	if tA != blas.NoTrans {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB != blas.NoTrans {
		br, bc = n, k
	}
	if m < 0 || n < 0 || k < 0 || lda < max(1, ac) || ldb < max(1, bc) || ldc < max(1, n) ||
		(k > 0 && (len(a) < lda*(ar-1)+ac || len(b) < ldb*(br-1)+bc)) || len(c) < ldc*(m-1)+n {
		panic("openblas: bad sgemm arguments")
	}
}
