package model

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// gemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices,
// C (m, n), through the installed blas32 implementation.
func gemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas32.Implementation().Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

const (
	noT = blas.NoTrans
	tr  = blas.Trans
)
