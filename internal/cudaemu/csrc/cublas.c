// cublas.c: the emulated cuBLAS (libcublas.so.12): GEMMs in column-major
// order by OpenBLAS's cblas_sgemm, with half and bfloat16 operands widened
// exactly to float and, in TF32 mode, float operands rounded to TF32 first.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

// OpenBLAS's CBLAS, declared here so that no header path is needed.
enum { CblasColMajor = 102, CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);

typedef int cublasStatus_t;
enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
       CUBLAS_TF32_TENSOR_OP_MATH = 3 };
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_PEDANTIC = 69, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };

#define HANDLE_MAGIC 0x43424c53U

struct handle {
	uint32_t magic;
	int math;
	void *stream;
};
typedef struct handle *cublasHandle_t;

EMU_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
	if (!h)
		return CUBLAS_STATUS_INVALID_VALUE;
	struct handle *p = calloc(1, sizeof *p);
	if (!p)
		return CUBLAS_STATUS_ALLOC_FAILED;
	p->magic = HANDLE_MAGIC;
	*h = p;
	return CUBLAS_STATUS_SUCCESS;
}

EMU_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
	if (!h || h->magic != HANDLE_MAGIC)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->magic = 0;
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

EMU_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, void *stream) {
	if (!h || h->magic != HANDLE_MAGIC)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->stream = stream; // every operation runs at once anyway
	return CUBLAS_STATUS_SUCCESS;
}

EMU_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, int mode) {
	if (!h || h->magic != HANDLE_MAGIC)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	int base = mode & 0xf; // the flag bits (16: no reduced-precision reductions) change nothing here
	if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
	    base != CUBLAS_TF32_TENSOR_OP_MATH)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (mode & ~0x1f)
		return CUBLAS_STATUS_INVALID_VALUE;
	h->math = base;
	return CUBLAS_STATUS_SUCCESS;
}

// ---- number formats

static float bits_float(uint32_t u) {
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}
static uint32_t float_bits(float f) {
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static float bf16_to_float(uint16_t h) { return bits_float((uint32_t)h << 16); }

static float half_to_float(uint16_t h) {
	uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f)
		return bits_float(s | 0x7f800000u | (m << 13));
	if (e == 0) {
		float v = (float)m * 5.9604644775390625e-8f; // m * 2^-24, exact
		return s ? -v : v;
	}
	return bits_float(s | ((e + 112u) << 23) | (m << 13));
}

static uint16_t float_to_bf16(float f) {
	uint32_t u = float_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static uint16_t float_to_half(float f) {
	uint32_t u = float_bits(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00u);
	if (a >= 0x477ff000u)
		return (uint16_t)(s | 0x7c00u);
	if (a < 0x38800000u) {
		float v = bits_float(a) * 16777216.0f;
		uint32_t m = (uint32_t)v;
		float r = v - (float)m;
		if (r > 0.5f || (r == 0.5f && (m & 1u)))
			m++;
		return (uint16_t)(s | m);
	}
	uint32_t e = (a >> 23) - 112u, m = a & 0x7fffffu, h = (e << 10) | (m >> 13), rest = m & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
		h++;
	return (uint16_t)(s | h);
}

// tf32 rounds f to TF32 (10 explicit mantissa bits), to nearest even.
static float tf32(float f) {
	uint32_t u = float_bits(f);
	if ((u & 0x7f800000u) == 0x7f800000u)
		return f; // Inf and NaN as they are
	u += 0xfffu + ((u >> 13) & 1u);
	return bits_float(u & ~0x1fffu);
}

static size_t type_size(int t) { return t == CUDA_R_32F ? 4 : 2; }

// load packs the rows x cols column-major matrix at p (leading dimension
// ld, type t) into a float buffer with leading dimension rows, rounding
// to TF32 when asked.
static float *load(const void *p, int t, int rows, int cols, int ld, int round_tf32) {
	float *out = malloc((size_t)rows * cols * sizeof *out);
	if (!out)
		return NULL;
	for (int j = 0; j < cols; j++)
		for (int i = 0; i < rows; i++) {
			size_t at = (size_t)j * ld + i;
			float v;
			if (t == CUDA_R_32F)
				v = ((const float *)p)[at];
			else if (t == CUDA_R_16F)
				v = half_to_float(((const uint16_t *)p)[at]);
			else
				v = bf16_to_float(((const uint16_t *)p)[at]);
			out[(size_t)j * rows + i] = round_tf32 ? tf32(v) : v;
		}
	return out;
}

static int check_matrix(const char *call, const char *what, const void *p, int t, int rows, int cols,
                        int ld) {
	if (rows == 0 || cols == 0)
		return 1;
	size_t bytes = (((size_t)cols - 1) * ld + rows) * type_size(t);
	if (cudaemu_check_range(call, (uint64_t)(uintptr_t)p, bytes))
		return 1;
	fprintf(stderr, "cudaemu: %s: matrix %s (%d x %d, ld %d) is out of bounds\n", call, what, rows, cols,
	        ld);
	return 0;
}

static int max1(int v) { return v > 1 ? v : 1; }

// gemm is C = alpha op(A) op(B) + beta C for every supported type.
static cublasStatus_t gemm(const char *call, cublasHandle_t h, int ta, int tb, int m, int n, int k,
                           float alpha, const void *a, int atype, int lda, const void *b, int btype,
                           int ldb, float beta, void *c, int ctype, int ldc, int round_tf32) {
	if (!h || h->magic != HANDLE_MAGIC)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
	    (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 ||
	    lda < max1(ta == CUBLAS_OP_N ? m : k) || ldb < max1(tb == CUBLAS_OP_N ? k : n) ||
	    ldc < max1(m))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0 || ((alpha == 0 || k == 0) && beta == 1))
		return CUBLAS_STATUS_SUCCESS;
	int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
	int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
	int use_ab = alpha != 0 && k > 0;
	if ((use_ab && (!check_matrix(call, "A", a, atype, arows, acols, lda) ||
	                !check_matrix(call, "B", b, btype, brows, bcols, ldb))) ||
	    !check_matrix(call, "C", c, ctype, m, n, ldc))
		return CUBLAS_STATUS_INVALID_VALUE;

	// C as float, packed with leading dimension m.
	float *cf = malloc((size_t)m * n * sizeof *cf);
	if (!cf)
		return CUBLAS_STATUS_ALLOC_FAILED;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			size_t at = (size_t)j * ldc + i;
			float v = 0;
			if (beta != 0) { // beta == 0: C is not read (it may hold NaN)
				if (ctype == CUDA_R_32F)
					v = ((float *)c)[at];
				else if (ctype == CUDA_R_16F)
					v = half_to_float(((uint16_t *)c)[at]);
				else
					v = bf16_to_float(((uint16_t *)c)[at]);
			}
			cf[(size_t)j * m + i] = v;
		}
	if (use_ab) {
		float *af = load(a, atype, arows, acols, lda, round_tf32 && atype == CUDA_R_32F);
		float *bf = load(b, btype, brows, bcols, ldb, round_tf32 && btype == CUDA_R_32F);
		if (!af || !bf) {
			free(af);
			free(bf);
			free(cf);
			return CUBLAS_STATUS_ALLOC_FAILED;
		}
		cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
		            tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha, af, arows, bf, brows,
		            beta, cf, m);
		free(af);
		free(bf);
	} else {
		for (size_t i = 0; i < (size_t)m * n; i++)
			cf[i] *= beta;
	}
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			size_t at = (size_t)j * ldc + i;
			float v = cf[(size_t)j * m + i];
			if (ctype == CUDA_R_32F)
				((float *)c)[at] = v;
			else if (ctype == CUDA_R_16F)
				((uint16_t *)c)[at] = float_to_half(v);
			else
				((uint16_t *)c)[at] = float_to_bf16(v);
		}
	free(cf);
	return CUBLAS_STATUS_SUCCESS;
}

EMU_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                                         const float *alpha, const float *a, int lda, const float *b,
                                         int ldb, const float *beta, float *c, int ldc) {
	if (!alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	int tf = h && h->magic == HANDLE_MAGIC && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
	return gemm("cublasSgemm", h, ta, tb, m, n, k, *alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
	            *beta, c, CUDA_R_32F, ldc, tf);
}

// cublasGemmEx supports A and B of one type among fp32, fp16 and bf16, C
// fp32 or of A's type, compute CUBLAS_COMPUTE_32F[_PEDANTIC|_FAST_TF32] with
// float alpha and beta; the algorithm is ignored.
EMU_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                                       const void *alpha, const void *a, int atype, int lda,
                                       const void *b, int btype, int ldb, const void *beta, void *c,
                                       int ctype, int ldc, int compute, int algo) {
	(void)algo;
	if (!h || h->magic != HANDLE_MAGIC)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
	    compute != CUBLAS_COMPUTE_32F_FAST_TF32)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if ((atype != CUDA_R_32F && atype != CUDA_R_16F && atype != CUDA_R_16BF) || btype != atype ||
	    (ctype != CUDA_R_32F && ctype != atype))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	int tf = atype == CUDA_R_32F &&
	         (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
	          (compute == CUBLAS_COMPUTE_32F && h->math == CUBLAS_TF32_TENSOR_OP_MATH));
	return gemm("cublasGemmEx", h, ta, tb, m, n, k, *(const float *)alpha, a, atype, lda, b, btype,
	            ldb, *(const float *)beta, c, ctype, ldc, tf);
}
