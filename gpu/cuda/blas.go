package cuda

/*
#include "shim.h"
*/
import "C"

// DataType is a cudaDataType: the element type of a GemmEx operand.
type DataType int

// The cudaDataType values GemmEx takes.
const (
	R32F  DataType = 0  // float32
	R16F  DataType = 2  // IEEE half, as uint16 bits
	R16BF DataType = 14 // bfloat16, as uint16 bits
)

// cuBLAS math modes (cublasMath_t).
const (
	blasDefaultMath    = 0
	blasTF32TensorMath = 3
)

// BLAS is a cuBLAS handle. Its calls queue work on its stream and, like
// the driver's, need its context bound on the calling thread.
type BLAS struct {
	h C.cublasHandle_t
}

// NewBLAS loads cuBLAS and creates a handle in c (cublasCreate).
func (c *Context) NewBLAS() (*BLAS, error) {
	if err := LoadBLAS(); err != nil {
		return nil, err
	}
	unbind, err := c.bindHere()
	if err != nil {
		return nil, err
	}
	defer unbind()
	b := &BLAS{}
	if r := C.hc_cublasCreate_v2(&b.h); r != 0 {
		return nil, blasError("cublasCreate", int(r))
	}
	return b, nil
}

func (b *BLAS) ok() error {
	if b.h == nil {
		return errDestroyed
	}
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

const errDestroyed = errString("cuda: the cuBLAS handle is destroyed")

// SetStream makes b queue its work on s (cublasSetStream); nil is the
// legacy default stream.
func (b *BLAS) SetStream(s *Stream) error {
	if err := b.ok(); err != nil {
		return err
	}
	if r := C.hc_cublasSetStream_v2(b.h, s.handle()); r != 0 {
		return blasError("cublasSetStream", int(r))
	}
	return nil
}

// SetTF32 lets fp32 GEMMs use TF32 tensor cores
// (CUBLAS_TF32_TENSOR_OP_MATH), or not (CUBLAS_DEFAULT_MATH).
func (b *BLAS) SetTF32(on bool) error {
	if err := b.ok(); err != nil {
		return err
	}
	mode := C.int(blasDefaultMath)
	if on {
		mode = blasTF32TensorMath
	}
	if r := C.hc_cublasSetMathMode(b.h, mode); r != 0 {
		return blasError("cublasSetMathMode", int(r))
	}
	return nil
}

func op(trans bool) C.int {
	if trans {
		return 1 // CUBLAS_OP_T
	}
	return 0 // CUBLAS_OP_N
}

// Sgemm computes C = alpha op(A) op(B) + beta C in float32, column-major,
// with op(A) m x k, op(B) k x n and C m x n: exactly cublasSgemm.
func (b *BLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a Ptr, lda int, bm Ptr, ldb int, beta float32, cm Ptr, ldc int) error {
	if err := b.ok(); err != nil {
		return err
	}
	r := C.hc_cublas_sgemm(b.h, op(transA), op(transB), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.CUdeviceptr(a), C.int(lda), C.CUdeviceptr(bm), C.int(ldb),
		C.float(beta), C.CUdeviceptr(cm), C.int(ldc))
	if r != 0 {
		return blasError("cublasSgemm", int(r))
	}
	return nil
}

// GemmEx is Sgemm with operand types ta, tb, tc, accumulating in float32
// (cublasGemmEx with CUBLAS_COMPUTE_32F and CUBLAS_GEMM_DEFAULT; alpha and
// beta are float32).
func (b *BLAS) GemmEx(transA, transB bool, m, n, k int, alpha float32, a Ptr, ta DataType, lda int, bm Ptr, tb DataType, ldb int, beta float32, cm Ptr, tc DataType, ldc int) error {
	if err := b.ok(); err != nil {
		return err
	}
	r := C.hc_gemmex(b.h, op(transA), op(transB), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.CUdeviceptr(a), C.int(ta), C.int(lda), C.CUdeviceptr(bm), C.int(tb), C.int(ldb),
		C.float(beta), C.CUdeviceptr(cm), C.int(tc), C.int(ldc))
	if r != 0 {
		return blasError("cublasGemmEx", int(r))
	}
	return nil
}

// Destroy destroys the handle (cublasDestroy); a second call does nothing.
func (b *BLAS) Destroy() error {
	if b.h == nil {
		return nil
	}
	h := b.h
	b.h = nil
	if r := C.hc_cublasDestroy_v2(h); r != 0 {
		return blasError("cublasDestroy", int(r))
	}
	return nil
}
