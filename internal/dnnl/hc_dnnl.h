// C side of package dnnl: oneDNN primitives wrapped so that one Go call is
// one C call (handles set, primitives executed, handles cleared).

#ifndef HC_DNNL_H
#define HC_DNNL_H

#include <stddef.h>
#include <stdint.h>

typedef struct hcdnnl_conv hcdnnl_conv;
typedef struct hcdnnl_gemm hcdnnl_gemm;

// hcdnnl_conv_new builds the primitives; on failure it returns the dnnl status
// and sets *stage to what failed (a static string). wino asks for
// Winograd primitives (f32 only); where oneDNN has none for the shape, it
// fails (dnnl_unimplemented).
int hcdnnl_conv_new(hcdnnl_conv **out, long n, long h, long w, long c, long o, long k,
		long s, long p, int bf16, int plainw, int wino, const char **stage);
// gen names the contents of w: calls with the same nonzero gen reuse the
// weights as reordered by the first (0: always reorder). For a bf16
// convolution, x16 and dy16, when not NULL, are x and dy already in
// bf16 (x and dy are then not read); NULL converts x and dy.
int hcdnnl_conv_fwd(hcdnnl_conv *cv, const float *x, const uint16_t *x16, const float *w, unsigned long gen, float *y);
int hcdnnl_conv_bwd_data(hcdnnl_conv *cv, const float *dy, const uint16_t *dy16, const float *w, unsigned long gen, float *dx);
int hcdnnl_conv_bwd_weights(hcdnnl_conv *cv, const float *x, const uint16_t *x16, const float *dy, const uint16_t *dy16, float *dw);
// which: 0 forward, 1 backward data, 2 backward weights.
const char *hcdnnl_conv_impl(hcdnnl_conv *cv, int which);
void hcdnnl_conv_free(hcdnnl_conv *cv);

int hcdnnl_gemm_new(hcdnnl_gemm **out, int ta, int tb, long m, long n, long k, long lda,
		long ldb, long ldc, int acc, int bf16, const char **stage);
int hcdnnl_gemm_run(hcdnnl_gemm *g, const float *a, const float *b, float *c);
int hcdnnl_gemm_run_bf16(hcdnnl_gemm *g, const uint16_t *a, const uint16_t *b, float *c);
const char *hcdnnl_gemm_impl(hcdnnl_gemm *g);
void hcdnnl_gemm_free(hcdnnl_gemm *g);

int hcdnnl_sgemm(int ta, int tb, long m, long n, long k, float alpha, const float *a,
		long lda, const float *b, long ldb, float beta, float *c, long ldc);

// hcdnnl_to_bf16 converts n floats to bfloat16 (round to nearest even, denormals
// to zero as VCVTNEPS2BF16 does); hcdnnl_to_bf16_plain is the portable loop.
void hcdnnl_to_bf16(uint16_t *dst, const float *src, long n);
void hcdnnl_to_bf16_plain(uint16_t *dst, const float *src, long n);
int hcdnnl_bf16_vector(void);

// hcdnnl_cpu_bf16: bit 0 AVX512-BF16, bit 1 AMX-BF16 (cpuid), bit 2 AMX tile
// state enabled by the OS (XCR0 bits 17 and 18).
int hcdnnl_cpu_bf16(void);
const char *hcdnnl_isa(void);
int hcdnnl_omp_max_threads(void);

#endif
